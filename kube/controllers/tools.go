//go:build tools

// Keeps the controllers' main packages required, so go mod tidy keeps their dependencies.
package controllers

import (
	_ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
	_ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
	_ "sigs.k8s.io/jobset"
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
