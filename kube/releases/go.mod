// The upstream releases the repository installs (trainyard/repo/model/releases.py: why each
// version, its known issues; trainyard/repo/model/upstream.py renders them from these modules).
// Nothing here is compiled: the module exists so that `go mod download` fetches each release at
// its pin and go.sum holds the hash each must have (the go command refuses a download that does
// not match). A separate module, so these pins never move the dependencies of kube/go.mod.
//
// Do not run `go mod tidy` here: nothing imports these modules, so tidy would drop them all.
module trainyard.dev/kube/releases

// Argo CD v3.6.2's go.mod asks for go 1.27.0. This line stays at 1.26.3 so that a Go 1.26 reads
// every other release: nothing here is compiled, and trainyard/repo/model/gomodules.py fetches the
// Argo CD module alone with go1.27.3 (NEWER_GO), which the go command fetches from the module proxy.
go 1.26.3

require (
	// Argo CD itself (Application, ApplicationSet, AppProject): v3.6.2, the release the
	// repository targets (kube/kustomize/go.mod, kube/helm/go.mod: the kustomize and Helm it
	// bundles; kube/argocd/go.mod: the same release, run in the cluster tier); CRDs at
	// argo-cd@v3.6.2:manifests/crds
	github.com/argoproj/argo-cd/v3 v3.6.2
	// base/cert-manager/application.yaml: chart cert-manager targetRevision v1.21.2, packaged from
	// cert-manager@v1.21.2:deploy/charts/cert-manager
	github.com/cert-manager/cert-manager v1.21.2
	// base/whereabouts/install: the files of doc/crds at v0.9.4
	github.com/k8snetworkplumbingwg/whereabouts v0.9.4
	// base/rdma-device-plugin: a copy of deployment/k8s/base at v1.5.3 (a test compares them)
	github.com/Mellanox/k8s-rdma-shared-dev-plugin v1.5.3
	// base/trainer/application.yaml: targetRevision v2.3.0, path manifests/overlays/manager
	// (CRDs at trainer/v2@v2.3.0:manifests/base/crds)
	github.com/kubeflow/trainer/v2 v2.3.0
	// base/training-operator/application.yaml: targetRevision v1.9.4 (a tag of the
	// kubeflow/trainer repository, whose go.mod there names this module), CRDs at
	// training-operator@v1.9.4:manifests/base/crds
	github.com/kubeflow/training-operator v1.9.4
	// Prometheus Operator (PodMonitor, ServiceMonitor, PrometheusRule): installed outside the
	// repository where clusters/<cluster>/cluster.yaml says spec.monitoring: prometheus-operator;
	// its CRDs at prometheus-operator@v0.94.1:example/prometheus-operator-crd serve the objects of
	// base/monitoring (trainyard validate and the local cluster read them from here)
	github.com/prometheus-operator/prometheus-operator v0.94.1
	// base/multus/install/kustomization.yaml: multus-cni v4.3.0
	// deployments/multus-daemonset-thick.yml, whose first document is the CRD (the module path
	// of Multus v4 is gopkg.in/...multus-cni.v4: multus-cni@v4.3.0:go.mod)
	gopkg.in/k8snetworkplumbingwg/multus-cni.v4 v4.3.0
	// base/trainer/application.yaml: JobSet v0.12.0 through trainer@v2.3.0:manifests/third-party/jobset
	// (CRD at jobset@v0.12.0:config/components/crd/bases)
	sigs.k8s.io/jobset v0.12.0
	// base/kueue/application.yaml: chart kueue targetRevision 0.19.2, the release v0.19.2,
	// packaged from kueue@v0.19.2:charts/kueue
	sigs.k8s.io/kueue v0.19.2
)
