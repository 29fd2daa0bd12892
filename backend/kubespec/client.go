package kubespec

import (
	"fmt"
	"net/http"
	"runtime"
	"strconv"

	"github.com/coredns/coredns/coremain"
	"github.com/coredns/coredns/plugin/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// restConfig builds the API client configuration the kubernetes plugin
// would build for k (kubeconfig, endpoint and tls, or the in-cluster
// ServiceAccount), with the stanza's apiserver_qps, apiserver_burst and
// apiserver_max_inflight.
func restConfig(k *kubernetes.Kubernetes, o options) (*rest.Config, error) {
	cfg, err := baseConfig(k)
	if err != nil {
		return nil, err
	}
	if o.apiQPS != "" {
		qps, err := strconv.ParseFloat(o.apiQPS, 32)
		if err != nil {
			return nil, fmt.Errorf("apiserver_qps %q: %w", o.apiQPS, err)
		}
		if qps > 0 {
			cfg.QPS = float32(qps)
		}
	}
	if o.apiBurst != "" {
		burst, err := strconv.Atoi(o.apiBurst)
		if err != nil {
			return nil, fmt.Errorf("apiserver_burst %q: %w", o.apiBurst, err)
		}
		if burst > 0 {
			cfg.Burst = burst
		}
	}
	if o.apiMaxInflight != "" {
		limit, err := strconv.Atoi(o.apiMaxInflight)
		if err != nil {
			return nil, fmt.Errorf("apiserver_max_inflight %q: %w", o.apiMaxInflight, err)
		}
		if limit > 0 {
			wrap := cfg.WrapTransport
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
				if wrap != nil {
					rt = wrap(rt)
				}
				return &inflightLimit{next: rt, slots: make(chan struct{}, limit)}
			}
		}
	}
	return cfg, nil
}

func baseConfig(k *kubernetes.Kubernetes) (*rest.Config, error) {
	if k.ClientConfig != nil {
		cfg, err := k.ClientConfig.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		return cfg, nil
	}
	var cfg *rest.Config
	if len(k.APIServerList) == 0 {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
		cfg = c
	} else {
		// As the plugin: only the first endpoint is used.
		overrides := &clientcmd.ConfigOverrides{
			ClusterInfo: clientcmdapi.Cluster{Server: k.APIServerList[0], CertificateAuthority: k.APICertAuth},
			AuthInfo:    clientcmdapi.AuthInfo{ClientCertificate: k.APIClientCert, ClientKey: k.APIClientKey},
		}
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{}, overrides).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", k.APIServerList[0], err)
		}
		cfg = c
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.UserAgent = fmt.Sprintf("%s/%s git_commit:%s (%s/%s/%s)", coremain.CoreName, coremain.CoreVersion, coremain.GitCommit,
		runtime.GOOS, runtime.GOARCH, runtime.Version())
	return cfg, nil
}

// inflightLimit bounds the requests in flight to the API server
// (apiserver_max_inflight); a request whose context ends while it waits
// for a slot fails with the context's error.
type inflightLimit struct {
	next  http.RoundTripper
	slots chan struct{} // one token per request in flight
}

func (l *inflightLimit) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case l.slots <- struct{}{}:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	defer func() { <-l.slots }()
	return l.next.RoundTrip(r)
}
