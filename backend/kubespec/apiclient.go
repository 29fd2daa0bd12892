package kubespec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// apiClient is what the Controller asks the API server through: one REST
// client for the core group (Services, Namespaces, Pods, Nodes) and one
// for discovery.k8s.io (EndpointSlices), decoding with a scheme of those
// two groups only. client-go's clientset would build a typed client for
// each of the API's groups on top of what the kubernetes plugin's setup
// already built.
type apiClient struct {
	core, discovery rest.Interface
	params          runtime.ParameterCodec
}

// scheme holds the types the Controller decodes.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("kubespec scheme: %v", err))
		}
	}
	return s
}()

// newAPIClient builds the clients from cfg; they share one HTTP client
// (one connection pool) and, as client-go's clientset does, one rate
// limiter when the configuration sets a rate.
func newAPIClient(cfg *rest.Config) (*apiClient, error) {
	cfg = rest.CopyConfig(cfg)
	// Protobuf, as client-go's clientset asks for built-in types: a
	// quarter of JSON's bytes on every list and watch event, for the API
	// server and for this process.
	if cfg.ContentType == "" {
		cfg.ContentType = runtime.ContentTypeProtobuf
	}
	if cfg.AcceptContentTypes == "" {
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, fmt.Errorf("burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	c := &apiClient{params: runtime.NewParameterCodec(scheme)}
	core := rest.CopyConfig(cfg)
	core.APIPath, core.GroupVersion, core.NegotiatedSerializer = "/api", &corev1.SchemeGroupVersion, codecs
	disc := rest.CopyConfig(cfg)
	disc.APIPath, disc.GroupVersion, disc.NegotiatedSerializer = "/apis", &discoveryv1.SchemeGroupVersion, codecs
	if c.core, err = rest.RESTClientForConfigAndClient(core, httpClient); err != nil {
		return nil, err
	}
	if c.discovery, err = rest.RESTClientForConfigAndClient(disc, httpClient); err != nil {
		return nil, err
	}
	return c, nil
}
