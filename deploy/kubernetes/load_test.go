package kubernetes_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// This file reads the manifests; manifests_test.go checks them.

// kinds maps apiVersion and kind to the typed Kubernetes struct a document
// is decoded into. A kind missing here fails the test: add it with the
// checks it needs.
var kinds = map[string]func() metav1.Object{
	"v1/Namespace":             func() metav1.Object { return &corev1.Namespace{} },
	"v1/ServiceAccount":        func() metav1.Object { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":             func() metav1.Object { return &corev1.ConfigMap{} },
	"v1/Secret":                func() metav1.Object { return &corev1.Secret{} },
	"v1/Service":               func() metav1.Object { return &corev1.Service{} },
	"v1/PersistentVolumeClaim": func() metav1.Object { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/DaemonSet":        func() metav1.Object { return &appsv1.DaemonSet{} },
	"apps/v1/StatefulSet":      func() metav1.Object { return &appsv1.StatefulSet{} },
	"apps/v1/Deployment":       func() metav1.Object { return &appsv1.Deployment{} },
	"batch/v1/Job":             func() metav1.Object { return &batchv1.Job{} },
}

// kustomization is the part of kustomization.yaml these manifests use,
// decoded strictly: a field added here is a field the checks understand.
type kustomization struct {
	APIVersion         string               `json:"apiVersion"`
	Kind               string               `json:"kind"`
	Namespace          string               `json:"namespace,omitempty"`
	Resources          []string             `json:"resources,omitempty"`
	Labels             []kustomizationLabel `json:"labels,omitempty"`
	ConfigMapGenerator []configMapGenerator `json:"configMapGenerator,omitempty"`
}

type kustomizationLabel struct {
	Pairs            map[string]string `json:"pairs"`
	IncludeSelectors bool              `json:"includeSelectors,omitempty"`
	IncludeTemplates bool              `json:"includeTemplates,omitempty"`
}

type configMapGenerator struct {
	Name     string   `json:"name"`
	Files    []string `json:"files,omitempty"`
	Literals []string `json:"literals,omitempty"`
}

// object is one decoded manifest document.
type object struct {
	file string // relative to deploy/kubernetes
	kind string
	meta metav1.Object
}

func (o *object) String() string { return o.kind + "/" + o.meta.GetName() + " (" + o.file + ")" }

// manifests is everything under deploy/kubernetes.
type manifests struct {
	objects        []*object
	byKey          map[string]*object        // kind/name
	kustomizations map[string]*kustomization // directory -> its kustomization.yaml
	yamlFiles      []string                  // every YAML file but kustomization.yaml
}

// add decodes the documents of file strictly and indexes them by kind and
// name; an object defined twice is an error.
func (m *manifests) add(file string, docs [][]byte) []error {
	var errs []error
	for i, doc := range docs {
		o, err := decodeObject(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s, document %d: %v", file, i+1, err))
			continue
		}
		o.file = file
		key := o.kind + "/" + o.meta.GetName()
		if prev, ok := m.byKey[key]; ok {
			errs = append(errs, fmt.Errorf("%s: %s is also defined in %s", file, key, prev.file))
			continue
		}
		m.byKey[key] = o
		m.objects = append(m.objects, o)
	}
	return errs
}

var loadOnce = sync.OnceValues(func() (*manifests, error) { return load(".") })

// loadManifests reads and strictly decodes every YAML file once per run.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m, err := loadOnce()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func load(root string) (*manifests, error) {
	m := &manifests{byKey: map[string]*object{}, kustomizations: map[string]*kustomization{}}
	var errs []error
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(p); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		rel := filepath.ToSlash(p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if d.Name() == "kustomization.yaml" || d.Name() == "kustomization.yml" {
			var k kustomization
			if err := yaml.UnmarshalStrict(b, &k); err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", rel, err))
				return nil
			}
			m.kustomizations[path.Dir(rel)] = &k
			return nil
		}
		m.yamlFiles = append(m.yamlFiles, rel)
		docs, err := splitDocuments(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", rel, err))
			return nil
		}
		errs = append(errs, m.add(rel, docs)...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m.addGenerated()
	return m, nil
}

// addGenerated adds the ConfigMaps that kustomizations generate, so that
// references to them resolve like references to ConfigMap files.
func (m *manifests) addGenerated() {
	for dir, k := range m.kustomizations {
		for _, g := range k.ConfigMapGenerator {
			cm := &corev1.ConfigMap{Data: map[string]string{}}
			cm.Name = g.Name
			for _, f := range g.Files {
				key, _, ok := strings.Cut(f, "=") // "key=file" or "file"
				if !ok {
					key = path.Base(f)
				}
				cm.Data[key] = ""
			}
			for _, l := range g.Literals {
				key, _, _ := strings.Cut(l, "=")
				cm.Data[key] = ""
			}
			o := &object{file: path.Join(dir, "kustomization.yaml"), kind: "ConfigMap", meta: cm}
			m.byKey["ConfigMap/"+g.Name] = o
			m.objects = append(m.objects, o)
		}
	}
}

// splitDocuments cuts a multi-document YAML file at its "---" lines and
// drops the documents that hold only comments.
func splitDocuments(b []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, err
		}
		if v != nil {
			docs = append(docs, doc)
		}
	}
}

// decodeObject decodes one document into the typed struct its apiVersion
// and kind name, strictly: an unknown or misspelt field is an error.
func decodeObject(doc []byte) (*object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind this test knows (add it to kinds)", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := strictUnmarshal(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %v", tm.Kind, err)
	}
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s without metadata.name", tm.Kind)
	}
	return &object{kind: tm.Kind, meta: obj}, nil
}

// strictUnmarshal is yaml.UnmarshalStrict (unknown fields and duplicate
// keys fail) made case-sensitive: encoding/json matches keys without
// regard to case, so "hostnetwork: true" would pass as hostNetwork. Every
// key that holds a value must come back when the typed value is encoded
// again, spelt the same.
func strictUnmarshal(doc []byte, into any) error {
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		return err
	}
	var written any
	if err := yaml.Unmarshal(doc, &written); err != nil {
		return err
	}
	b, err := json.Marshal(into)
	if err != nil {
		return err
	}
	var decoded any
	if err := json.Unmarshal(b, &decoded); err != nil {
		return err
	}
	if lost := lostKeys("", written, decoded); len(lost) > 0 {
		return fmt.Errorf("fields not understood as spelt (mind the case): %s", strings.Join(lost, ", "))
	}
	return nil
}

// lostKeys lists the paths of written that hold a non-empty value and are
// missing from decoded.
func lostKeys(at string, written, decoded any) []string {
	var lost []string
	switch w := written.(type) {
	case map[string]any:
		d, _ := decoded.(map[string]any)
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			dv, ok := d[k]
			if !ok {
				if !isEmpty(w[k]) {
					lost = append(lost, at+"."+k)
				}
				continue
			}
			lost = append(lost, lostKeys(at+"."+k, w[k], dv)...)
		}
	case []any:
		d, _ := decoded.([]any)
		for i, v := range w {
			if i < len(d) {
				lost = append(lost, lostKeys(fmt.Sprintf("%s[%d]", at, i), v, d[i])...)
			}
		}
	}
	return lost
}

// isEmpty reports values that omitempty drops when encoding again.
func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case float64:
		return x == 0
	case string:
		return x == ""
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// get returns the object of that kind and name, or fails the test.
func get[T metav1.Object](t *testing.T, m *manifests, kind, name string) T {
	t.Helper()
	o, ok := m.byKey[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s named %q in deploy/kubernetes", kind, name)
	}
	v, ok := o.meta.(T)
	if !ok {
		t.Fatalf("%s is a %T", o, o.meta)
	}
	return v
}

// workload is a pod template and what owns it.
type workload struct {
	obj            *object
	selector       *metav1.LabelSelector
	template       *corev1.PodTemplateSpec
	claimTemplates []corev1.PersistentVolumeClaim
	serviceName    string // StatefulSet only
	runsToEnd      bool   // a Job: no probes
}

func (w workload) String() string { return w.obj.kind + "/" + w.obj.meta.GetName() }

func (m *manifests) workloads() []workload {
	var ws []workload
	for _, o := range m.objects {
		switch v := o.meta.(type) {
		case *appsv1.DaemonSet:
			ws = append(ws, workload{obj: o, selector: v.Spec.Selector, template: &v.Spec.Template})
		case *appsv1.Deployment:
			ws = append(ws, workload{obj: o, selector: v.Spec.Selector, template: &v.Spec.Template})
		case *appsv1.StatefulSet:
			ws = append(ws, workload{obj: o, selector: v.Spec.Selector, template: &v.Spec.Template,
				claimTemplates: v.Spec.VolumeClaimTemplates, serviceName: v.Spec.ServiceName})
		case *batchv1.Job:
			ws = append(ws, workload{obj: o, selector: v.Spec.Selector, template: &v.Spec.Template, runsToEnd: true})
		}
	}
	return ws
}

// containers returns the init containers and the containers of a pod.
func containers(spec *corev1.PodSpec) []*corev1.Container {
	var cs []*corev1.Container
	for i := range spec.InitContainers {
		cs = append(cs, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		cs = append(cs, &spec.Containers[i])
	}
	return cs
}

// keysOf returns the keys a ConfigMap or Secret holds, or false when there
// is no such object.
func (m *manifests) keysOf(kind, name string) ([]string, bool) {
	o, ok := m.byKey[kind+"/"+name]
	if !ok {
		return nil, false
	}
	var keys []string
	switch v := o.meta.(type) {
	case *corev1.ConfigMap:
		for k := range v.Data {
			keys = append(keys, k)
		}
		for k := range v.BinaryData {
			keys = append(keys, k)
		}
	case *corev1.Secret:
		for k := range v.Data {
			keys = append(keys, k)
		}
		for k := range v.StringData {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, true
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
