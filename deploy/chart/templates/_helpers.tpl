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

{{- /* The policy's metadata.name: policy.name, else the inline or shipped policy's. */ -}}
{{- define "dra.policyName" -}}
{{- if .Values.policy.name -}}{{- .Values.policy.name -}}
{{- else if .Values.policy.existingConfigMap -}}
{{- fail "mode compiled with policy.existingConfigMap: set policy.name to the metadata.name of the policy in it (the reconciler's RBAC names its objects by it)" -}}
{{- else -}}{{- ((include "dra.policy" .) | fromYaml).metadata.name -}}
{{- end -}}
{{- end -}}

{{- /* deploy/compiled/rbac.yaml's reconciler ClusterRole for the release's policy: its resourceNames, written for the
shipped policy (gpu-fleet-*.dra-migration.io), renamed for this one (webhook/compile object_names). Input:
{"ctx": $, "role": the ClusterRole}; changes it in place. */ -}}
{{- define "dra.reconcilerNames" -}}
{{- $name := include "dra.policyName" .ctx -}}
{{- range .role.rules -}}
{{- $rule := . -}}
{{- if and .resourceNames (hasSuffix ".dra-migration.io" (first .resourceNames)) -}}
{{- $names := list -}}
{{- range .resourceNames -}}
{{- if not (hasPrefix "gpu-fleet-" .) -}}{{- fail (printf "files/compiled/rbac.yaml: %s is not a name of the shipped policy gpu-fleet: regenerate it (tests/deploy/test_compiled.py)" .) -}}{{- end -}}
{{- $names = append $names (printf "%s-%s" $name (trimPrefix "gpu-fleet-" .)) -}}
{{- end -}}
{{- $_ := set $rule "resourceNames" $names -}}
{{- end -}}
{{- end -}}
{{- end -}}
