// Package e2e runs nodedns as users meet it: the chart installed with Helm
// on real kubelet nodes (testbed.AddRealNode), images built from the tree,
// while client pods resolve continuously. The runs need root and build with
// -tags e2e (`make e2e`).
package e2e
