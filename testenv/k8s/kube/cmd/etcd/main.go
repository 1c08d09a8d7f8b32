// Command etcd: the etcd server at the version k8s.io/kubernetes pins for its own tests
// (go.etcd.io/etcd/server/v3). `go install go.etcd.io/etcd/v3@...` cannot build it: the
// root etcd module has replace directives.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
