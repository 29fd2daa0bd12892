package kubespec

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// store is the informers' store (a cache.Indexer) kept small: the objects
// by key in one map, and each index a plain map from value to the objects
// with it, nearly always one. client-go's indexer keeps a set (a map) per
// index value on top of that, several hundred bytes per Service at the
// three indexes the kubernetes plugin's stores have; here an index entry
// is a map slot and a one-pointer slice.
//
// T is the converted object the stores hold (*object.Service,
// *object.Endpoints, *object.Pod); the informer's processor puts nothing
// else in. Objects are immutable once stored: an update stores a new one.
type store[T comparable] struct {
	mu      sync.RWMutex
	items   map[string]T // by cache.MetaNamespaceKeyFunc
	indexes map[string]*storeIndex[T]
	rv      string // the last resource version synced (Bookmark)
}

type storeIndex[T comparable] struct {
	values func(T) []string
	m      map[string][]T
}

// errIndexers: the index set is fixed when the store is built.
var errIndexers = errors.New("kubespec store: indexers cannot be added")

// newStore returns a store with the named index functions.
func newStore[T comparable](indexes map[string]func(T) []string) *store[T] {
	s := &store[T]{items: map[string]T{}, indexes: map[string]*storeIndex[T]{}}
	for name, f := range indexes {
		s.indexes[name] = &storeIndex[T]{values: f, m: map[string][]T{}}
	}
	return s
}

func (s *store[T]) object(obj any) (T, error) {
	v, ok := obj.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("kubespec store: got %T, want %T", obj, zero)
	}
	return v, nil
}

// Add stores obj, replacing the object of the same key.
func (s *store[T]) Add(obj any) error {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	v, err := s.object(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(key, v)
	return nil
}

// Update is Add.
func (s *store[T]) Update(obj any) error { return s.Add(obj) }

// Delete removes the object of obj's key (a cache.DeletedFinalStateUnknown
// names it by key).
func (s *store[T]) Delete(obj any) error {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.items[key]; ok {
		s.unindex(old)
		delete(s.items, key)
	}
	return nil
}

// put stores v under key; the caller holds mu.
func (s *store[T]) put(key string, v T) {
	if old, ok := s.items[key]; ok {
		s.unindex(old)
	}
	s.items[key] = v
	for _, ix := range s.indexes {
		for _, val := range ix.values(v) {
			ix.m[val] = append(ix.m[val], v)
		}
	}
}

// unindex removes v from every index; the caller holds mu.
func (s *store[T]) unindex(v T) {
	for _, ix := range s.indexes {
		for _, val := range ix.values(v) {
			objs := slices.DeleteFunc(ix.m[val], func(o T) bool { return o == v })
			if len(objs) == 0 {
				delete(ix.m, val)
			} else {
				ix.m[val] = objs
			}
		}
	}
}

func (s *store[T]) List() []any {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]any, 0, len(s.items))
	for _, v := range s.items {
		out = append(out, v)
	}
	return out
}

func (s *store[T]) ListKeys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.items))
	for k := range s.items {
		out = append(out, k)
	}
	return out
}

func (s *store[T]) Get(obj any) (any, bool, error) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, err
	}
	return s.GetByKey(key)
}

func (s *store[T]) GetByKey(key string) (any, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.items[key]
	if !ok {
		return nil, false, nil
	}
	return v, true, nil
}

// Replace sets the store's contents to objs as of resource version rv.
func (s *store[T]) Replace(objs []any, rv string) error {
	items := make(map[string]T, len(objs))
	for _, o := range objs {
		key, err := cache.MetaNamespaceKeyFunc(o)
		if err != nil {
			return err
		}
		v, err := s.object(o)
		if err != nil {
			return err
		}
		items[key] = v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = map[string]T{}
	for _, ix := range s.indexes {
		ix.m = map[string][]T{}
	}
	for k, v := range items {
		s.put(k, v)
	}
	s.rv = rv
	return nil
}

// Resync does nothing: the store is not a queue.
func (s *store[T]) Resync() error { return nil }

func (s *store[T]) LastStoreSyncResourceVersion() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

func (s *store[T]) Bookmark(rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv = rv
}

// ByIndex returns the objects whose index values include value.
func (s *store[T]) ByIndex(index, value string) ([]any, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix, ok := s.indexes[index]
	if !ok {
		return nil, fmt.Errorf("index %q does not exist", index)
	}
	objs := ix.m[value]
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out, nil
}

// Index returns the objects sharing an index value with obj.
func (s *store[T]) Index(index string, obj any) ([]any, error) {
	v, err := s.object(obj)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix, ok := s.indexes[index]
	if !ok {
		return nil, fmt.Errorf("index %q does not exist", index)
	}
	var out []any
	seen := map[T]bool{}
	for _, val := range ix.values(v) {
		for _, o := range ix.m[val] {
			if !seen[o] {
				seen[o] = true
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// IndexKeys returns the keys of the objects ByIndex returns.
func (s *store[T]) IndexKeys(index, value string) ([]string, error) {
	objs, err := s.ByIndex(index, value)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		k, err := cache.MetaNamespaceKeyFunc(o)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func (s *store[T]) ListIndexFuncValues(index string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix, ok := s.indexes[index]
	if !ok {
		return nil
	}
	out := make([]string, 0, len(ix.m))
	for v := range ix.m {
		out = append(out, v)
	}
	return out
}

// GetIndexers returns the index functions in client-go's form.
func (s *store[T]) GetIndexers() cache.Indexers {
	out := cache.Indexers{}
	for name, ix := range s.indexes {
		out[name] = func(obj any) ([]string, error) {
			v, err := s.object(obj)
			if err != nil {
				return nil, err
			}
			return ix.values(v), nil
		}
	}
	return out
}

// AddIndexers is refused: the index set is fixed.
func (s *store[T]) AddIndexers(cache.Indexers) error { return errIndexers }

// The typed reads the Controller answers the kubernetes plugin with.

func (s *store[T]) list() []T {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]T, 0, len(s.items))
	for _, v := range s.items {
		out = append(out, v)
	}
	return out
}

func (s *store[T]) get(key string) (T, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.items[key]
	return v, ok
}

// byIndex returns a copy: the index's slice changes under later writes.
func (s *store[T]) byIndex(index, value string) []T {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix, ok := s.indexes[index]
	if !ok {
		return nil
	}
	return slices.Clone(ix.m[value])
}
