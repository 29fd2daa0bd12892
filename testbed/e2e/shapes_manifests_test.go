package e2e

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/nodedns/nodedns/testbed"
)

// The DNS objects each distribution deploys, as it deploys them: names,
// labels, selectors, ClusterIPs, ports, Corefiles and autoscalers from its
// published manifests and charts. What differs from the real thing, and
// why: the image is the backend's (CoreDNS with the plugins these
// Corefiles use; GKE's kube-dns containers are not CoreDNS), pulled never;
// tolerations, resources and topology spreading are left out (two
// untainted nodes, one per client); and the ClusterIPs outside the
// testbed's service range are made allocatable by a ServiceCIDR object, as
// a cluster installed with that range has them.
//
// Placeholders: IMAGE is the CoreDNS image, CPA the autoscaler's.

// k3sManifest is k3s's packaged manifests/coredns.yaml as its deploy
// controller applies it: the objects carry the controller's owner label
// and annotations (objectset.rio.cattle.io/*), the Deployment sets no
// replicas (1, the API server's default), the Service's ports have no
// targetPort, and the Corefile imports the optional coredns-custom
// ConfigMap's files.
const k3sManifest = `
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata:
  name: shapes-10-43
spec:
  cidrs: ["10.43.0.0/16"]
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
  labels: {objectset.rio.cattle.io/hash: 01d8b8a7f1e1b8b1b0b6f1e0c53f7a8e2b33b1a7}
  annotations: {objectset.rio.cattle.io/id: "", objectset.rio.cattle.io/owner-gvk: "k3s.cattle.io/v1, Kind=Addon", objectset.rio.cattle.io/owner-name: coredns, objectset.rio.cattle.io/owner-namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
  labels: {kubernetes.io/bootstrapping: rbac-defaults}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
  labels: {kubernetes.io/bootstrapping: rbac-defaults}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects:
- {kind: ServiceAccount, name: coredns, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
  labels: {objectset.rio.cattle.io/hash: 01d8b8a7f1e1b8b1b0b6f1e0c53f7a8e2b33b1a7}
  annotations: {objectset.rio.cattle.io/id: "", objectset.rio.cattle.io/owner-gvk: "k3s.cattle.io/v1, Kind=Addon", objectset.rio.cattle.io/owner-name: coredns, objectset.rio.cattle.io/owner-namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
          pods insecure
          fallthrough in-addr.arpa ip6.arpa
        }
        hosts /etc/coredns/NodeHosts {
          ttl 60
          reload 15s
          fallthrough
        }
        prometheus :9153
        forward . /etc/resolv.conf
        cache 30
        loop
        reload
        loadbalance
        import /etc/coredns/custom/*.override
    }
    import /etc/coredns/custom/*.server
  NodeHosts: |
    172.31.254.11 node-a
    172.31.254.12 node-b
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS, objectset.rio.cattle.io/hash: 01d8b8a7f1e1b8b1b0b6f1e0c53f7a8e2b33b1a7}
  annotations: {objectset.rio.cattle.io/id: "", objectset.rio.cattle.io/owner-gvk: "k3s.cattle.io/v1, Kind=Addon", objectset.rio.cattle.io/owner-name: coredns, objectset.rio.cattle.io/owner-namespace: kube-system}
spec:
  revisionHistoryLimit: 0
  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      priorityClassName: system-cluster-critical
      serviceAccountName: coredns
      nodeSelector: {kubernetes.io/os: linux}
      dnsPolicy: Default
      containers:
      - name: coredns
        image: IMAGE
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        volumeMounts:
        - {name: config-volume, mountPath: /etc/coredns, readOnly: true}
        - {name: custom-config-volume, mountPath: /etc/coredns/custom, readOnly: true}
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        - {containerPort: 9153, name: metrics, protocol: TCP}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {add: [NET_BIND_SERVICE], drop: [all]}
          readOnlyRootFilesystem: true
        livenessProbe:
          httpGet: {path: /health, port: 8080, scheme: HTTP}
          initialDelaySeconds: 60
          periodSeconds: 10
          timeoutSeconds: 1
          successThreshold: 1
          failureThreshold: 3
        readinessProbe:
          httpGet: {path: /ready, port: 8181, scheme: HTTP}
          periodSeconds: 2
          timeoutSeconds: 1
          successThreshold: 1
          failureThreshold: 3
      volumes:
      - name: config-volume
        configMap:
          name: coredns
          items:
          - {key: Corefile, path: Corefile}
          - {key: NodeHosts, path: NodeHosts}
      - name: custom-config-volume
        configMap: {name: coredns-custom, optional: true}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  annotations: {prometheus.io/port: "9153", prometheus.io/scrape: "true", objectset.rio.cattle.io/id: "", objectset.rio.cattle.io/owner-gvk: "k3s.cattle.io/v1, Kind=Addon", objectset.rio.cattle.io/owner-name: coredns, objectset.rio.cattle.io/owner-namespace: kube-system}
  labels: {k8s-app: kube-dns, kubernetes.io/cluster-service: "true", kubernetes.io/name: CoreDNS, objectset.rio.cattle.io/hash: 01d8b8a7f1e1b8b1b0b6f1e0c53f7a8e2b33b1a7}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: 10.43.0.10
  clusterIPs: [10.43.0.10]
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
  - {name: metrics, port: 9153, protocol: TCP}
  ipFamilyPolicy: PreferDualStack
`

// rke2Manifest is what RKE2's helm-controller installs from its
// rke2-coredns chart (a patch of coredns/helm): Deployment and Service
// rke2-coredns-rke2-coredns at 10.43.0.10, selected by the chart's
// app.kubernetes.io/instance and app.kubernetes.io/name besides k8s-app,
// with port names udp-53 and tcp-53, and the chart's
// cluster-proportional-autoscaler rke2-coredns-rke2-coredns-autoscaler.
const rke2Manifest = `
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata:
  name: shapes-10-43
spec:
  cidrs: ["10.43.0.0/16"]
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: rke2-coredns-rke2-coredns
  namespace: kube-system
  labels: {app.kubernetes.io/instance: rke2-coredns, app.kubernetes.io/managed-by: Helm, app.kubernetes.io/name: rke2-coredns, k8s-app: kube-dns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: rke2-coredns-rke2-coredns
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: rke2-coredns-rke2-coredns
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: rke2-coredns-rke2-coredns}
subjects:
- {kind: ServiceAccount, name: rke2-coredns-rke2-coredns, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: rke2-coredns-rke2-coredns
  namespace: kube-system
  labels: {app.kubernetes.io/instance: rke2-coredns, app.kubernetes.io/managed-by: Helm, app.kubernetes.io/name: rke2-coredns, k8s-app: kube-dns}
data:
  Corefile: |-
    .:53 {
        errors
        health {
            lameduck 10s
        }
        ready
        kubernetes cluster.local cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        prometheus 0.0.0.0:9153
        forward . /etc/resolv.conf
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: rke2-coredns-rke2-coredns
  namespace: kube-system
  labels: {app.kubernetes.io/instance: rke2-coredns, app.kubernetes.io/managed-by: Helm, app.kubernetes.io/name: rke2-coredns, helm.sh/chart: rke2-coredns-1.42.302, k8s-app: kube-dns, kubernetes.io/cluster-service: "true", kubernetes.io/name: CoreDNS}
  annotations: {meta.helm.sh/release-name: rke2-coredns, meta.helm.sh/release-namespace: kube-system}
spec:
  replicas: 2
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%, maxUnavailable: 1}}
  selector: {matchLabels: {app.kubernetes.io/instance: rke2-coredns, app.kubernetes.io/name: rke2-coredns, k8s-app: kube-dns}}
  template:
    metadata:
      labels: {app.kubernetes.io/instance: rke2-coredns, app.kubernetes.io/name: rke2-coredns, k8s-app: kube-dns}
    spec:
      serviceAccountName: rke2-coredns-rke2-coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      nodeSelector: {kubernetes.io/os: linux}
      containers:
      - name: coredns
        image: IMAGE
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        volumeMounts:
        - {name: config-volume, mountPath: /etc/coredns}
        ports:
        - {containerPort: 53, protocol: UDP, name: udp-53}
        - {containerPort: 53, protocol: TCP, name: tcp-53}
        - {containerPort: 9153, protocol: TCP, name: metrics}
        livenessProbe:
          httpGet: {path: /health, port: 8080, scheme: HTTP}
          initialDelaySeconds: 60
          periodSeconds: 10
          timeoutSeconds: 5
          successThreshold: 1
          failureThreshold: 5
        readinessProbe:
          httpGet: {path: /ready, port: 8181, scheme: HTTP}
          initialDelaySeconds: 0
          periodSeconds: 2
          timeoutSeconds: 5
          successThreshold: 1
          failureThreshold: 1
        securityContext:
          capabilities: {add: [NET_BIND_SERVICE]}
          readOnlyRootFilesystem: true
      volumes:
      - name: config-volume
        configMap:
          name: rke2-coredns-rke2-coredns
          items:
          - {key: Corefile, path: Corefile}
---
apiVersion: v1
kind: Service
metadata:
  name: rke2-coredns-rke2-coredns
  namespace: kube-system
  labels: {app.kubernetes.io/instance: rke2-coredns, app.kubernetes.io/managed-by: Helm, app.kubernetes.io/name: rke2-coredns, helm.sh/chart: rke2-coredns-1.42.302, k8s-app: kube-dns, kubernetes.io/cluster-service: "true", kubernetes.io/name: CoreDNS}
  annotations: {meta.helm.sh/release-name: rke2-coredns, meta.helm.sh/release-namespace: kube-system}
spec:
  selector: {app.kubernetes.io/instance: rke2-coredns, app.kubernetes.io/name: rke2-coredns, k8s-app: kube-dns}
  clusterIP: 10.43.0.10
  ports:
  - {port: 53, protocol: UDP, name: udp-53, targetPort: 53}
  - {port: 53, protocol: TCP, name: tcp-53, targetPort: 53}
  type: ClusterIP
---
AUTOSCALER
`

// kubesprayManifest is what kubespray's kubernetes-apps role applies
// (roles/kubernetes-apps/ansible, coredns_manifests with
// enable_dns_autoscaler): Service coredns at 10.233.0.3 (skydns_server,
// the 3rd address of 10.233.0.0/18) selecting k8s-app=kube-dns, the
// Deployment coredns, and the autoscaler dns-autoscaler
// (--target=Deployment/coredns, min 2).
const kubesprayManifest = `
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata:
  name: kubespray-services
spec:
  cidrs: ["10.233.0.0/18"]
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
  labels: {addonmanager.kubernetes.io/mode: Reconcile, kubernetes.io/cluster-service: "true"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
  labels: {kubernetes.io/bootstrapping: rbac-defaults, addonmanager.kubernetes.io/mode: Reconcile}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
  labels: {kubernetes.io/bootstrapping: rbac-defaults, addonmanager.kubernetes.io/mode: Reconcile}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects:
- {kind: ServiceAccount, name: coredns, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
  labels: {addonmanager.kubernetes.io/mode: EnsureExists}
data:
  Corefile: |
    .:53 {
        errors {
        }
        health {
            lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
          pods insecure
          fallthrough in-addr.arpa ip6.arpa
        }
        prometheus :9153
        forward . /etc/resolv.conf {
          prefer_udp
          max_concurrent 1000
        }
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: coredns}
spec:
  replicas: 2
  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 0, maxSurge: 10%}}
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      nodeSelector: {kubernetes.io/os: linux}
      priorityClassName: system-cluster-critical
      serviceAccountName: coredns
      dnsPolicy: Default
      containers:
      - name: coredns
        image: IMAGE
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        volumeMounts:
        - {name: config-volume, mountPath: /etc/coredns}
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        - {containerPort: 9153, name: metrics, protocol: TCP}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {add: [NET_BIND_SERVICE], drop: [all]}
          readOnlyRootFilesystem: true
        livenessProbe:
          httpGet: {path: /health, port: 8080, scheme: HTTP}
          timeoutSeconds: 5
          successThreshold: 1
          failureThreshold: 10
        readinessProbe:
          httpGet: {path: /ready, port: 8181, scheme: HTTP}
          periodSeconds: 2
          timeoutSeconds: 5
          successThreshold: 1
          failureThreshold: 10
      volumes:
      - name: config-volume
        configMap:
          name: coredns
          items:
          - {key: Corefile, path: Corefile}
---
apiVersion: v1
kind: Service
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: coredns, addonmanager.kubernetes.io/mode: Reconcile}
  annotations: {prometheus.io/port: "9153", prometheus.io/scrape: "true", createdby: kubespray}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: 10.233.0.3
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
  - {name: metrics, port: 9153, protocol: TCP}
---
AUTOSCALER
`

// gkeManifest is GKE Standard's DNS as its add-on manager reconciles it:
// the Deployment kube-dns (labelled addonmanager.kubernetes.io/mode:
// Reconcile, no replicas: kube-dns-autoscaler sets them), the Service
// kube-dns at the 10th address of the service range, and
// kube-dns-autoscaler (--target=deployment/kube-dns).
const gkeManifest = `
apiVersion: v1
kind: ServiceAccount
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {addonmanager.kubernetes.io/mode: Reconcile, kubernetes.io/cluster-service: "true"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: shapes:kube-dns
  labels: {kubernetes.io/bootstrapping: rbac-defaults, addonmanager.kubernetes.io/mode: Reconcile}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: shapes:kube-dns
  labels: {kubernetes.io/bootstrapping: rbac-defaults, addonmanager.kubernetes.io/mode: Reconcile}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: shapes:kube-dns}
subjects:
- {kind: ServiceAccount, name: kube-dns, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: kube-dns-corefile
  namespace: kube-system
  labels: {addonmanager.kubernetes.io/mode: Reconcile}
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
           pods insecure
           fallthrough in-addr.arpa ip6.arpa
           ttl 30
        }
        prometheus :9153
        forward . /etc/resolv.conf
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/cluster-service: "true", addonmanager.kubernetes.io/mode: Reconcile}
spec:
  strategy: {rollingUpdate: {maxSurge: 10%, maxUnavailable: 0}}
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      priorityClassName: system-cluster-critical
      serviceAccountName: kube-dns
      dnsPolicy: Default
      nodeSelector: {kubernetes.io/os: linux}
      containers:
      - name: kubedns
        image: IMAGE
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        volumeMounts:
        - {name: config-volume, mountPath: /etc/coredns}
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        - {containerPort: 9153, name: metrics, protocol: TCP}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {add: [NET_BIND_SERVICE], drop: [all]}
          readOnlyRootFilesystem: true
        readinessProbe:
          httpGet: {path: /ready, port: 8181, scheme: HTTP}
          periodSeconds: 2
      volumes:
      - name: config-volume
        configMap:
          name: kube-dns-corefile
          items:
          - {key: Corefile, path: Corefile}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/cluster-service: "true", kubernetes.io/name: KubeDNS, addonmanager.kubernetes.io/mode: Reconcile}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: 10.96.0.10
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
AUTOSCALER
`

// autoscalerManifest is a cluster-proportional-autoscaler Deployment as
// the distributions ship it, with its ServiceAccount and the RBAC of the
// upstream example (nodes; the target's scale; its ConfigMap).
// Placeholders: NAME, TARGET (kind/name), PARAMS (--default-params JSON),
// CPA (image), COMMAND (the container's command).
const autoscalerManifest = `
apiVersion: v1
kind: ServiceAccount
metadata:
  name: NAME
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: NAME
rules:
- {apiGroups: [""], resources: [nodes], verbs: [list, watch]}
- {apiGroups: [""], resources: [replicationcontrollers/scale], verbs: [get, update]}
- {apiGroups: [apps], resources: [deployments/scale, replicasets/scale], verbs: [get, update]}
- {apiGroups: [""], resources: [configmaps], verbs: [get, create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: NAME
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: NAME}
subjects:
- {kind: ServiceAccount, name: NAME, namespace: kube-system}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: NAME
  namespace: kube-system
  labels: {k8s-app: NAME, kubernetes.io/cluster-service: "true"}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: NAME}}
  template:
    metadata:
      labels: {k8s-app: NAME}
    spec:
      serviceAccountName: NAME
      priorityClassName: system-cluster-critical
      nodeSelector: {kubernetes.io/os: linux}
      containers:
      - name: autoscaler
        image: CPA
        imagePullPolicy: Never
        command:
        - COMMAND
        - --namespace=kube-system
        - --configmap=NAME
        - --target=TARGET
        - '--default-params={"linear":PARAMS}'
        - --logtostderr=true
        - --v=2
`

// TestShapeManifests: every shape's manifest, its placeholders filled,
// decodes into objects with a kind and a name, and its DNS Service and
// Deployment are among them with the shape's ClusterIP.
func TestShapeManifests(t *testing.T) {
	r := &shapesRun{imgs: nodeImages{backend: testbed.Archive{Ref: "example.test/backend:v1"}}}
	for _, s := range shapes() {
		var m string
		switch s.name {
		case "k3s":
			m = r.manifest(k3sManifest, nil)
		case "rke2":
			m = r.manifest(rke2Manifest, &autoscaler{name: "a", target: "Deployment/x", params: "{}"})
		case "kubespray":
			m = r.manifest(kubesprayManifest, &autoscaler{name: "a", target: "Deployment/x", params: "{}"})
		case "gke":
			m = r.manifest(gkeManifest, &autoscaler{name: "a", target: "Deployment/x", params: "{}"})
		default:
			continue // testbed.DeployCoreDNS's objects
		}
		dec := k8syaml.NewYAMLOrJSONDecoder(strings.NewReader(m), 4096)
		found := map[string]bool{}
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			if u.Object == nil {
				continue
			}
			if u.GetKind() == "" || u.GetName() == "" {
				t.Errorf("%s: an object without kind or name: %v", s.name, u.Object)
			}
			found[u.GetKind()+"/"+u.GetName()] = true
			if u.GetKind() == "Service" && u.GetName() == s.service {
				if ip, _, _ := unstructured.NestedString(u.Object, "spec", "clusterIP"); ip != s.clusterIP {
					t.Errorf("%s: Service %s at %s, want %s", s.name, s.service, ip, s.clusterIP)
				}
			}
			if strings.Contains(fmt.Sprint(u.Object), "IMAGE") || strings.Contains(fmt.Sprint(u.Object), "AUTOSCALER") {
				t.Errorf("%s: %s/%s keeps a placeholder", s.name, u.GetKind(), u.GetName())
			}
		}
		for _, want := range []string{"Service/" + s.service, "Deployment/" + s.deployment} {
			if !found[want] {
				t.Errorf("%s: no %s in %v", s.name, want, found)
			}
		}
	}
}
