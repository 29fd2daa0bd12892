// Package helm renders the nodedns chart (helm/nodedns) with the Helm SDK and
// decodes what it renders into k8s.io/api types. Tests use it to check the
// chart in every mode, pod.yaml uses it for the default rendering, and node
// tests use NodeContainers to start the binaries exactly as kubelet would
// from the rendered DaemonSet.
package helm
