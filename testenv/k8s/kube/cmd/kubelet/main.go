// Command kubelet: mirrors k8s.io/kubernetes/cmd/kubelet/kubelet.go at the pinned tag, for the
// real nodes of the test environment (testenv/kubelet). Built by testenv/k8s/build.sh with
// -tags providerless, like the control plane.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // for client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	command := app.NewKubeletCommand()
	code := cli.Run(command)
	os.Exit(code)
}
