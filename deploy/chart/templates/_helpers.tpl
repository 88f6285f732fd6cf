{{/*
The objects of one file of the kustomize tree (files/ links to deploy/), as {"items": [...]}.
Comment-only documents are dropped.
*/}}
{{- define "dra.docs" -}}
{{- $items := list -}}
{{- range regexSplit "(?m)^---[ \t]*$" (.ctx.Files.Get .path) -1 -}}
{{- $o := fromYaml . -}}
{{- if $o.kind -}}{{- $items = append $items $o -}}{{- end -}}
{{- end -}}
{{- toYaml (dict "items" $items) -}}
{{- end -}}

{{/* The labels kustomize's base adds to every object, with Helm's own managed-by and chart labels. */}}
{{- define "dra.labels" -}}
app.kubernetes.io/name: dra-migration-webhook
app.kubernetes.io/instance: dra-webhook
app.kubernetes.io/part-of: dra-migration-webhook
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
One base object finished as kustomize finishes it: the common labels merged over its own, and the
release namespace on namespaced kinds. Input: {"ctx": $, "obj": map}.
*/}}
{{- define "dra.finish" -}}
{{- $o := .obj -}}
{{- $labels := merge (fromYaml (include "dra.labels" .ctx)) ($o.metadata.labels | default dict) -}}
{{- $_ := set $o.metadata "labels" $labels -}}
{{- if not (has $o.kind (list "Namespace" "ClusterRole" "ClusterRoleBinding" "MutatingWebhookConfiguration" "ValidatingWebhookConfiguration")) -}}
{{- $_ := set $o.metadata "namespace" .ctx.Release.Namespace -}}
{{- end -}}
{{- toYaml $o -}}
{{- end -}}

{{/* The policy ConfigMap's name: the user's, or a content-hashed one as kustomize's generator does. */}}
{{- define "dra.policyConfigMap" -}}
{{- if and .Values.policy.inline .Values.policy.existingConfigMap -}}
{{- fail "policy.inline and policy.existingConfigMap are both set: the Deployment mounts one policy; set only one" -}}
{{- end -}}
{{- if .Values.policy.existingConfigMap -}}
{{- .Values.policy.existingConfigMap -}}
{{- else -}}
{{- printf "dra-webhook-policy-%s" (include "dra.policy" . | sha256sum | trunc 10) -}}
{{- end -}}
{{- end -}}

{{- define "dra.policy" -}}
{{- .Values.policy.inline | default (.Files.Get "files/base/policy/default.yaml") -}}
{{- end -}}

{{- /* The policy YAML's own names, quoted, sorted and comma-separated as webhook/compile/narrow.py unowned writes them:
each resource's name and legacyNames (narrow.owned). */ -}}
{{- define "dra.ownedNames" -}}
{{- $names := list }}
{{- range ((. | fromYaml).spec | default dict).resources | default list }}
{{- $names = concat $names (list .name) (.legacyNames | default list) }}
{{- end }}
{{- $quoted := list }}
{{- range ($names | uniq | sortAlpha) }}{{ $quoted = append $quoted (printf "'%s'" .) }}{{ end }}
{{- join ", " $quoted }}
{{- end -}}

{{- define "dra.tlsSecret" -}}
{{- .Values.certs.existingSecret | default "dra-webhook-tls" -}}
{{- end -}}

{{- /* The webhook rules for the policy's spec.workloadKinds, as `dra-webhook lint --webhook-rules` prints them, as
{"items": [...]}: none for a policy kept in an existing ConfigMap (the chart cannot read it: use
webhooks.extraRules). */ -}}
{{- define "dra.workloadRules" -}}
{{- $items := list }}
{{- if not .Values.policy.existingConfigMap }}
{{- range ((include "dra.checkedPolicy" . | fromYaml).spec | default dict).workloadKinds | default list }}
{{- $items = append $items (dict "apiGroups" (list .group) "apiVersions" .versions "resources" (list .resource) "operations" (list "CREATE" "UPDATE") "scope" "Namespaced") }}
{{- end }}
{{- end }}
{{- toYaml (dict "items" $items) }}
{{- end -}}

{{- /* The policy YAML after the checks Helm can make before anything is applied: it parses, it is one
dra-migration.io/v1alpha1 MigrationPolicy, and it has no top-level key the loader would refuse. The rest (every
field, every rule) is `dra-webhook lint`'s, in the pre-install/pre-upgrade hook (templates/policy-check.yaml). */ -}}
{{- define "dra.checkedPolicy" -}}
{{- if and .Values.policy.inline .Values.policy.existingConfigMap -}}
{{- fail "policy.inline and policy.existingConfigMap are both set: the Deployment mounts one policy; set only one" -}}
{{- end -}}
{{- $text := include "dra.policy" . }}
{{- $what := ternary "policy.inline" "the shipped default policy (files/base/policy/default.yaml)" (ne .Values.policy.inline "") }}
{{- $p := $text | fromYaml }}
{{- if hasKey $p "Error" }}{{ fail (printf "%s is not YAML: %s" $what (get $p "Error")) }}{{ end }}
{{- if ne (get $p "apiVersion" | toString) "dra-migration.io/v1alpha1" }}{{ fail (printf "%s: apiVersion is %q, expected dra-migration.io/v1alpha1" $what (get $p "apiVersion" | toString)) }}{{ end }}
{{- if ne (get $p "kind" | toString) "MigrationPolicy" }}{{ fail (printf "%s: kind is %q, expected MigrationPolicy" $what (get $p "kind" | toString)) }}{{ end }}
{{- range $k, $_ := $p }}{{ if not (has $k (list "apiVersion" "kind" "metadata" "spec")) }}{{ fail (printf "%s: unknown top-level key %q (allowed: apiVersion, kind, metadata, spec)" $what $k) }}{{ end }}{{ end }}
{{- range (list "metadata" "spec") }}{{ if not (hasKey $p .) }}{{ fail (printf "%s: required key %q is missing" $what .) }}{{ end }}{{ if not (kindIs "map" (get $p .)) }}{{ fail (printf "%s: %s must be a mapping" $what .) }}{{ end }}{{ end }}
{{- $text }}
{{- end -}}

{{- /* The release's image, as the Deployment runs it: the values' repository and tag over the base's. */ -}}
{{- define "dra.image" -}}
{{- $c := first (first (include "dra.docs" (dict "ctx" $ "path" "files/base/deployment.yaml") | fromYaml).items).spec.template.spec.containers }}
{{- $image := splitList ":" $c.image }}
{{- printf "%s:%s" (.Values.image.repository | default (first $image)) (.Values.image.tag | default (last $image)) }}
{{- end -}}

{{- /* A hook or test Pod's spec parts: the restricted Pod Security profile the namespace enforces, small requests. */ -}}
{{- define "dra.hookContainerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}
