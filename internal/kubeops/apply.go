package kubeops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// MaxManifestObjects bounds the objects one applied manifest may hold.
const MaxManifestObjects = 2000

// ParseManifest splits a multi-document YAML (or JSON) manifest into its
// objects, a List's items included; empty documents are skipped. Each
// object needs apiVersion, kind and metadata.name.
func ParseManifest(manifest []byte) ([]*unstructured.Unstructured, error) {
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var raw map[string]any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("manifest document %d: %w", doc, err)
		}
		if len(raw) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: raw}
		objs := []*unstructured.Unstructured{u}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("manifest document %d: %w", doc, err)
			}
			objs = objs[:0]
			for i := range l.Items {
				objs = append(objs, &l.Items[i])
			}
		}
		for _, o := range objs {
			if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
				return nil, fmt.Errorf("manifest document %d: an object needs apiVersion, kind and metadata.name", doc)
			}
			out = append(out, o)
			if len(out) > MaxManifestObjects {
				return nil, fmt.Errorf("manifest has more than %d objects", MaxManifestObjects)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("manifest has no objects")
	}
	return out, nil
}

// ApplyManifest server-side applies every object of manifest through
// cfg's API server as fieldManager (kubectl apply --server-side
// --force-conflicts), in the manifest's order, and returns how many it
// applied. A kind the API server does not serve yet (a custom resource
// whose definition the same manifest creates) is looked up again once the
// definitions before it were applied.
func ApplyManifest(ctx context.Context, cfg *rest.Config, manifest []byte, fieldManager string) (int, error) {
	objs, err := ParseManifest(manifest)
	if err != nil {
		return 0, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return 0, err
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	force := true
	for i, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapping(ctx, mapper, gvk)
		if err != nil {
			return i, fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
				o.SetNamespace(ns)
			}
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		body, err := json.Marshal(o.Object)
		if err != nil {
			return i, err
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: fieldManager, Force: &force}); err != nil {
			return i, fmt.Errorf("apply %s %s: %w", gvk.Kind, objectName(o), err)
		}
		if gvk.Kind == "CustomResourceDefinition" {
			mapper.Reset()
		}
	}
	return len(objs), nil
}

// mapping is gvk's REST mapping, waiting a little for a kind whose
// definition was just applied.
func mapping(ctx context.Context, mapper *restmapper.DeferredDiscoveryRESTMapper, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil || !meta.IsNoMatchError(err) || time.Now().After(deadline) {
			return m, err
		}
		mapper.Reset()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func objectName(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return ns + "/" + o.GetName()
	}
	return o.GetName()
}
