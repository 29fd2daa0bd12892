{{/*
Keys of the coredns chart (github.com/coredns/helm) that nodedns's schema
accepts only to say what to use instead: a values file written for that
chart fails here with a pointer, instead of being silently ignored or
failing with a bare "additional property". Keys with the same meaning
(servers, priorityClassName, tolerations, nodeSelector, affinity,
podAnnotations, customLabels, extraVolumes, extraVolumeMounts,
isClusterService, k8sAppLabelOverride, service.clusterIP, service.name,
serviceAccount, rbac.create, prometheus.service.enabled,
prometheus.monitor) work as they do there.
*/}}
{{- define "nodedns.compat" -}}
{{- $top := dict
  "replicaCount" "nodedns runs one pod per node (a DaemonSet); remove replicaCount"
  "rollingUpdate" "use updateStrategy.rollingUpdate (maxSurge, maxUnavailable)"
  "autoscaler" "one pod per node grows with the cluster; remove autoscaler"
  "hpa" "one pod per node grows with the cluster; remove hpa"
  "podDisruptionBudget" "a DaemonSet's pods are not evicted by drains; remove podDisruptionBudget"
  "serviceType" "the kube-dns Service is a ClusterIP Service answered on every node; remove serviceType"
  "securityContext" "the chart sets each container's security context; the frontend's capabilities are frontend.capabilities"
  "podSecurityContext" "the chart sets each container's security context; remove podSecurityContext"
  "livenessProbe" "the chart's probes are fixed (their ports are frontend.healthPort, backend.healthPort, backend.readyPort); remove livenessProbe"
  "readinessProbe" "the chart's probes are fixed (their ports are frontend.healthPort, backend.healthPort, backend.readyPort); remove readinessProbe"
  "topologySpreadConstraints" "a DaemonSet runs on every node; restrict it with nodeSelector or affinity"
  "zoneFiles" "mount the zone files with extraVolumes and extraVolumeMounts and serve them from a servers entry"
  "extraConfig" "put those plugins in the servers entries"
  "extraSecrets" "mount Secrets with extraVolumes and extraVolumeMounts"
  "env" "use frontend.env (the frontend's environment)"
  "customAnnotations" "use podAnnotations and service.annotations"
  "deployment" "nodedns is a DaemonSet; coreDNS.deployment names the CoreDNS Deployment that the install hands off from"
  "initContainers" "the chart runs no extra init containers; remove initContainers"
  "extraContainers" "the chart runs no extra containers; remove extraContainers"
  "clusterRole" "the ClusterRole is named after the release; use rbac.create"
-}}
{{- range $key, $why := $top -}}
{{- if hasKey $.Values $key -}}
{{- fail (printf "%s is a key of the coredns chart, not of nodedns: %s" $key $why) -}}
{{- end -}}
{{- end -}}
{{- if hasKey .Values.image "repository" -}}
{{- fail "image.repository is the coredns chart's; nodedns has two images: set image.frontend.repository and image.backend.repository (image.tag is shared)" -}}
{{- end -}}
{{- range $k := list "limits" "requests" -}}
{{- if hasKey $.Values.resources $k -}}
{{- fail (printf "resources.%s is the coredns chart's; nodedns has two containers: set resources.backend.%s (CoreDNS) and resources.frontend.%s" $k $k $k) -}}
{{- end -}}
{{- end -}}
{{- range $i, $s := .Values.servers -}}
{{- if eq (toString $s.port) "53" -}}
{{- fail (printf "servers[%d].port is 53: in nodedns the frontend owns port 53 and the backend's blocks listen behind it, on \"{$NODEDNS_PORT}\" (this node's frontend) and \"{$NODEDNS_FALLBACK_PORT}\" (other nodes and the kube-dns Service); give the block one of those ports (values.yaml's servers)" $i) -}}
{{- end -}}
{{- end -}}
{{- end -}}
