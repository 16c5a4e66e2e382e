//go:build tools

// The main package built from this module (trainyard/cluster/components.py); imported here so
// that go.mod and go.sum keep what it needs.
package tools

import _ "github.com/argoproj/argo-cd/v3/cmd"
