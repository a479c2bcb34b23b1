// The template side of helm-render: the objects templates see, Helm's functions on top of sprig's, and
// rendering templates/ into one manifest stream ordered like `helm template`'s.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

type releaseInfo struct {
	Name, Namespace, Service string
	IsInstall, IsUpgrade     bool
	Revision                 int
}

type kubeVersionInfo struct{ Version, Major, Minor, GitVersion string }

func (k kubeVersionInfo) String() string { return k.Version }

// apiVersions is .Capabilities.APIVersions: Has("apps/v1") or Has("apps/v1/StatefulSet").
type apiVersions []string

func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type capabilities struct {
	KubeVersion kubeVersionInfo
	APIVersions apiVersions
}

// builtinAPIVersions are the API groups every cluster the chart supports (kubeVersion >= 1.24) serves.
var builtinAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "autoscaling/v1", "autoscaling/v2", "policy/v1",
	"networking.k8s.io/v1", "rbac.authorization.k8s.io/v1", "storage.k8s.io/v1",
	"apiextensions.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1",
}

// chartFiles is .Files: the chart's files outside templates/, read on demand. A symbolic link is
// followed wherever it points, as Helm's chart loader does.
type chartFiles struct{ dir string }

func (f chartFiles) GetBytes(name string) []byte {
	clean := path.Clean("/" + name)[1:]
	if clean == "" || strings.HasPrefix(clean, "templates/") {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(clean)))
	if err != nil {
		return nil // Helm's Files.Get answers "" for a file the chart lacks
	}
	return data
}

func (f chartFiles) Get(name string) string { return string(f.GetBytes(name)) }

type templateInfo struct{ Name, BasePath string }

type renderer struct {
	chartDir string
	meta     chartMeta
	top      map[string]interface{} // what every template sees, less .Template
	tpl      *template.Template     // every file of templates/, by "<chart>/templates/<file>"
	names    []string               // the files of templates/, sorted
}

func newRenderer(chartDir string, meta chartMeta, values map[string]interface{}, rel releaseInfo,
	kubeVersion string, extraAPIs []string, strict bool) (*renderer, error) {
	v := semver.MustParse(kubeVersion) // checked by checkKubeVersion
	r := &renderer{chartDir: chartDir, meta: meta}
	r.top = map[string]interface{}{
		"Values":  values,
		"Release": rel,
		"Chart":   meta,
		"Files":   chartFiles{chartDir},
		"Capabilities": capabilities{
			KubeVersion: kubeVersionInfo{
				Version: "v" + v.String(), Major: fmt.Sprint(v.Major()), Minor: fmt.Sprint(v.Minor()),
				GitVersion: "v" + v.String(),
			},
			APIVersions: append(append(apiVersions{}, builtinAPIVersions...), extraAPIs...),
		},
	}
	r.tpl = template.New(meta.Name)
	if strict {
		r.tpl.Option("missingkey=error")
	} else {
		r.tpl.Option("missingkey=zero")
	}
	r.tpl.Funcs(r.funcs())
	root := filepath.Join(chartDir, "templates")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		name := meta.Name + "/" + filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if _, err := r.tpl.New(name).Parse(string(data)); err != nil {
			return err
		}
		r.names = append(r.names, name)
		return nil
	})
	sort.Strings(r.names)
	return r, err
}

// funcs: sprig's, less env and expandenv (a render must not depend on the environment), and Helm's.
func (r *renderer) funcs() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["include"] = func(name string, data interface{}) (string, error) {
		var b strings.Builder
		err := r.tpl.ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := r.tpl.Clone()
		if err == nil {
			_, err = t.New("tpl").Parse(text)
		}
		var b strings.Builder
		if err == nil {
			err = t.ExecuteTemplate(&b, "tpl", data)
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), err
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if s, ok := v.(string); v == nil || (ok && s == "") {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	f["fail"] = func(msg string) (string, error) { return "", errors.New(msg) }
	f["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil // no cluster: what `helm template` answers
	}
	f["toYaml"] = func(v interface{}) string {
		data, err := yaml.Marshal(v)
		if err != nil {
			return "" // Helm's toYaml swallows the error too
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	f["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["toJson"] = func(v interface{}) string {
		data, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(data)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	return f
}

// installOrder is where Helm installs (and `helm template` prints) a kind; other kinds come last.
var installOrder = []string{
	"Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PodDisruptionBudget",
	"ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass", "PersistentVolume",
	"PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList",
	"ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
	"Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
}

func kindRank(kind string) int {
	for i, k := range installOrder {
		if k == kind {
			return i
		}
	}
	return len(installOrder)
}

type manifest struct {
	source, kind, text string
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// renderAll renders every template and returns the manifest stream and the rendered NOTES.txt.
func (r *renderer) renderAll() (string, string, error) {
	var manifests []manifest
	var notes string
	for _, name := range r.names {
		base := path.Base(name)
		isNotes := base == "NOTES.txt"
		isManifest := strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")
		if strings.HasPrefix(base, "_") || (!isNotes && !isManifest) {
			continue
		}
		data := map[string]interface{}{}
		for k, v := range r.top {
			data[k] = v
		}
		data["Template"] = templateInfo{Name: name, BasePath: r.meta.Name + "/templates"}
		var b strings.Builder
		if err := r.tpl.ExecuteTemplate(&b, name, data); err != nil {
			return "", "", err
		}
		out := strings.ReplaceAll(b.String(), "<no value>", "")
		if isNotes {
			notes = out
			continue
		}
		for _, doc := range docSeparator.Split(out, -1) {
			m, err := parseManifest(name, doc)
			if err != nil {
				return "", "", err
			}
			if m != nil {
				manifests = append(manifests, *m)
			}
		}
	}
	sort.SliceStable(manifests, func(i, j int) bool {
		return kindRank(manifests[i].kind) < kindRank(manifests[j].kind)
	})
	var b strings.Builder
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.source, m.text)
	}
	return b.String(), notes, nil
}

// parseManifest checks one rendered document; nil for a document with nothing but blanks and comments.
func parseManifest(source, doc string) (*manifest, error) {
	text := strings.TrimSpace(doc)
	var obj map[string]interface{}
	if err := yaml.Unmarshal([]byte(text), &obj); err != nil {
		return nil, fmt.Errorf("%s: the rendered YAML does not parse: %v\n%s", source, err, text)
	}
	if obj == nil {
		return nil, nil
	}
	kind, _ := obj["kind"].(string)
	apiVersion, _ := obj["apiVersion"].(string)
	if kind == "" || apiVersion == "" {
		return nil, fmt.Errorf("%s: a rendered object without apiVersion or kind:\n%s", source, text)
	}
	return &manifest{source: source, kind: kind, text: text}, nil
}
