# `make release` writes a release into dist/: the wheel and sdist, the Helm chart (.tgz) and the container
# image as an OCI image archive. One version source: pyproject.toml's [project].version; the chart's version,
# appVersion and default image tag are set from it when packaging (deploy/chart/ itself is not edited).
#
#   make release          everything below (the image needs root, mmdebstrap and umoci: deploy/image/README.md)
#   make dist             wheel + sdist        (python -m build; pip install build)
#   make chart            dist/dra-migration-webhook-<version>.tgz, helm lint --strict clean
#   make image            dist/dra-migration-webhook-<version>.oci.tar
#   make clean

PYTHON  ?= python3
HELM    ?= $(shell command -v helm 2>/dev/null || bash ../shared/helm/unpack.sh 2>/dev/null | tail -n1 | sed 's|$$|/helm|')
VERSION := $(shell $(PYTHON) -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
NAME    := dra-migration-webhook
DIST    := dist
STAGE   := build/chart-stage

.PHONY: release dist chart image clean version

release: dist chart image
	@echo "release $(VERSION):" && ls -l $(DIST)

version:
	@echo $(VERSION)

dist:
	$(PYTHON) -m build --outdir $(DIST) .

# deploy/chart/files/* are links into deploy/ (the chart and the kustomize overlays share the objects):
# package a dereferenced copy, so the .tgz holds files, never symbolic links.
chart:
	@test -x "$(HELM)" || { echo "no helm: set HELM= or put ../shared/helm next to the repository" >&2; exit 2; }
	rm -rf $(STAGE) && mkdir -p $(STAGE) $(DIST)
	cp -rL deploy/chart $(STAGE)/$(NAME)
	@if find $(STAGE) -type l | grep -q .; then echo "symbolic links left in $(STAGE)" >&2; exit 1; fi
	sed -i 's/^  tag: null$$/  tag: "$(VERSION)"/' $(STAGE)/$(NAME)/values.yaml
	grep -q '^  tag: "$(VERSION)"$$' $(STAGE)/$(NAME)/values.yaml
	"$(HELM)" package --version $(VERSION) --app-version $(VERSION) --destination $(DIST) $(STAGE)/$(NAME)
	"$(HELM)" lint --strict $(DIST)/$(NAME)-$(VERSION).tgz

image:
	$(PYTHON) deploy/image/build.py --output $(DIST)/$(NAME)-$(VERSION).oci.tar

clean:
	rm -rf $(DIST) $(STAGE)
