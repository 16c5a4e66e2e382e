// Command kube is every Kubernetes component a local trainyard cluster runs, in one binary that
// picks the component by the name it is called by (argv[0], or its first argument), the way
// argo-cd@v3.6.2:cmd/main.go and k3s do: the Kubernetes libraries the components share are
// compiled and linked once, not once per component.
//
// Each case is the upstream main of that component at the version go.mod pins:
// k8s.io/kubernetes@v1.36.5:cmd/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl},
// go.etcd.io/etcd/server/v3@v3.6.8:main.go. kustomize is built on its own, from kube/kustomize (a
// small build that `make validate` needs long before a cluster does).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // for timeZone support in CronJob (as kube-apiserver's and KCM's mains)

	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var components = map[string]func(args []string) int{
	"etcd": func(args []string) int {
		etcdmain.Main(args) // exits itself
		return 0
	},
	"kube-apiserver": func([]string) int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func([]string) int {
		return cli.Run(controllermanager.NewControllerManagerCommand())
	},
	"kube-scheduler": func([]string) int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubectl": func(args []string) int {
		logs.GlogSetter(kubectl.GetLogVerbosity(args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return 0
	},
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := components[name]; !ok && len(os.Args) > 1 {
		// `kube kubectl get pods`: drop our own name so the component sees its usual argv.
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	run, ok := components[name]
	if !ok {
		names := make([]string, 0, len(components))
		for n := range components {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: kube COMPONENT [ARGS...], or call it by a link named for one\ncomponents: %s\n", strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(run(os.Args))
}
