//go:build tools

// kustomize is built from its own main package (trainyard/cluster/components.py); this import
// keeps its module a direct requirement through `go mod tidy`.
package tools

import _ "sigs.k8s.io/kustomize/kustomize/v5"
