// Package e2e runs nodedns as users meet it: the chart installed with Helm
// on real kubelet nodes (testbed.AddRealNode), images built from the tree,
// while client pods resolve continuously. The runs need root; `make test`
// runs them as root, and `make e2e` runs them with the image and real-node
// tests alone.
package e2e
