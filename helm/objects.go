package helm

import (
	"errors"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Object is one rendered manifest decoded into its k8s.io/api type, or, for
// kinds outside client-go's scheme (the ServiceMonitor CRD), into
// *unstructured.Unstructured.
type Object struct {
	// Source is the template the object was rendered from.
	Source string
	GVK    schema.GroupVersionKind
	Obj    runtime.Object
}

// strictYAML decodes YAML into client-go's types and fails on a field the
// type does not have or a field given twice, as the API server's strict
// field validation does.
var strictYAML = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// Objects decodes every manifest strictly. Kinds unknown to client-go are
// decoded into Unstructured (after a strict YAML check for duplicate keys).
func (r *Rendering) Objects() ([]Object, error) {
	return decode(r.Manifests)
}

// HookObjects decodes the hooks' manifests as Objects does.
func (r *Rendering) HookObjects() ([]Object, error) {
	return decode(r.Hooks)
}

func decode(manifests []releaseutil.Manifest) ([]Object, error) {
	var objs []Object
	for _, m := range manifests {
		data := []byte(m.Content)
		obj, gvk, err := strictYAML.Decode(data, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err := yaml.UnmarshalStrict(data, &u.Object); err != nil {
				return nil, fmt.Errorf("%s: %w", m.Name, err)
			}
			gvk := u.GroupVersionKind()
			objs = append(objs, Object{Source: m.Name, GVK: gvk, Obj: u})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		objs = append(objs, Object{Source: m.Name, GVK: *gvk, Obj: obj})
	}
	return objs, nil
}

// Find returns the object of kind with name, or nil.
func Find(objs []Object, kind, name string) runtime.Object {
	for _, o := range objs {
		if o.GVK.Kind != kind {
			continue
		}
		if n, err := nameOf(o.Obj); err == nil && n == name {
			return o.Obj
		}
	}
	return nil
}

func nameOf(obj runtime.Object) (string, error) {
	type named interface{ GetName() string }
	n, ok := obj.(named)
	if !ok {
		return "", errors.New("object has no name")
	}
	return n.GetName(), nil
}

// DaemonSet returns the one DaemonSet of objs.
func DaemonSet(objs []Object) (*appsv1.DaemonSet, error) {
	var found *appsv1.DaemonSet
	for _, o := range objs {
		if ds, ok := o.Obj.(*appsv1.DaemonSet); ok {
			if found != nil {
				return nil, errors.New("more than one DaemonSet")
			}
			found = ds
		}
	}
	if found == nil {
		return nil, errors.New("no DaemonSet")
	}
	return found, nil
}

// ConfigMaps returns the ConfigMaps of objs by name.
func ConfigMaps(objs []Object) map[string]*corev1.ConfigMap {
	cms := map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok {
			cms[cm.Name] = cm
		}
	}
	return cms
}

// Kinds returns "Kind/name" of every object, in order: for messages.
func Kinds(objs []Object) string {
	var s []string
	for _, o := range objs {
		n, _ := nameOf(o.Obj)
		s = append(s, o.GVK.Kind+"/"+n)
	}
	return strings.Join(s, " ")
}
