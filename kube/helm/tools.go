//go:build tools

// helm is built from its own main package (trainyard/cluster/components.py); this import keeps
// its module a direct requirement through `go mod tidy`.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
