// kustomize, built from its module at the version Argo CD v3.6.2 bundles (argo-cd@v3.6.2:
// hack/tool-versions.sh, KUSTOMIZE_VERSION=5.8.3): `trainyard render`/`validate` build every folder
// with it (trainyard/repo/model/kustomize.py). A module of its own: kustomize v5.8.3 asks for Go
// 1.27 (its go.mod), which the go command fetches from the module proxy for this module alone
// (GOTOOLCHAIN, trainyard/repo/model/gomodules.py NEWER_GO), and its dependencies never move those
// of kube/go.mod, whose kubectl v1.36.5 embeds kustomize 5.8.1 (k8s.io/kubectl@v0.36.5:go.mod).
module trainyard.dev/kube/kustomize

go 1.27.0

require sigs.k8s.io/kustomize/kustomize/v5 v5.8.3

require (
	github.com/blang/semver/v4 v4.0.0 // indirect
	github.com/go-errors/errors v1.5.1 // indirect
	github.com/go-openapi/jsonpointer v1.0.0 // indirect
	github.com/go-openapi/jsonreference v1.0.0 // indirect
	github.com/google/gnostic-models v0.7.1 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/monochromegane/go-gitignore v0.0.0-20200626010858-205db1a8cc00 // indirect
	github.com/sergi/go-diff v1.4.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/xlab/treeprint v1.2.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gopkg.in/evanphx/json-patch.v4 v4.13.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	// sigs.k8s.io/kustomize/kyaml v0.21.3 asks for k8s.io/kube-openapi v0.0.0-20261001230523-97fa35140926,
	// whose zip the module proxy refuses ("403 Forbidden: This module version is not available");
	// kube-openapi@latest (2026-12-06) stands in. Their go.mod files differ only in dropping
	// github.com/NYTimes/gziphandler (vendored into pkg/internal/third_party), a package kustomize
	// does not import (it imports pkg/validation/spec and pkg/internal).
	k8s.io/kube-openapi v0.0.0-20261104182252-5bee61fc5225 // indirect
	sigs.k8s.io/kustomize/api v0.21.3 // indirect
	sigs.k8s.io/kustomize/cmd/config v0.21.3 // indirect
	sigs.k8s.io/kustomize/kyaml v0.21.3 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
