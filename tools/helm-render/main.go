// Command helm-render renders a Helm chart the way `helm template` does, for CI machines that have Go
// and Debian's sprig but no Helm (Helm is not packaged in Debian 12). It is Go's text/template with
// sprig's functions and Helm's own (render.go), driven by the same inputs as `helm template`:
//
//	helm-render [-f values.yaml]... [--set a.b=c]... [--namespace NS] [--kube-version v1.27.0] \
//	    [--strict] [--notes-out FILE] RELEASE CHART_DIR > manifests.yaml
//
// What it implements of Helm 3 (README.md in this folder says what it leaves out):
//   - Chart.yaml (apiVersion v2; name, version, appVersion, kubeVersion checked against --kube-version),
//     values.yaml, then each -f file, then each --set, merged the way Helm coalesces values: maps merge
//     key by key, anything else is replaced, and a null deletes the key.
//   - .Values .Release .Chart .Capabilities .Files .Template; include, tpl, required, fail, toYaml,
//     fromYaml, toJson, fromJson, lookup (always empty: no cluster); sprig without env and expandenv.
//   - templates/**: files starting with '_' hold definitions only; NOTES.txt is rendered (--notes-out)
//     but is no manifest; every other .yaml/.yml file is rendered, split at '---', empty documents
//     dropped, each document parsed as YAML and required to have apiVersion and kind.
//   - The output: documents in Helm's install order of kinds, each after '---' and '# Source: <path>'.
//
// --strict makes a reference to a value that values.yaml lacks an error (helm lint --strict), so a typo
// in a template fails instead of rendering as empty.
//
// Build (GOPATH mode against Debian's Go sources, as tests/deploy/helm_test.sh does):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o helm-render ./tools/helm-render
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/Masterminds/semver"
	"sigs.k8s.io/yaml"
)

// chartMeta is the part of Chart.yaml that templates and this tool read; templates see it as .Chart.
type chartMeta struct {
	APIVersion  string `json:"apiVersion"`
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	Description string `json:"description"`
	Type        string `json:"type"`
	KubeVersion string `json:"kubeVersion"`
}

// listFlag collects a flag given several times (-f a.yaml -f b.yaml).
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var valueFiles, sets, apiVersions listFlag
	fs := flag.NewFlagSet("helm-render", flag.ExitOnError)
	fs.Var(&valueFiles, "f", "a values file merged over the chart's values.yaml (repeatable; later wins)")
	fs.Var(&sets, "set", "a.b=c[,d=e]: a value merged last (repeatable); true/false/null and integers are typed")
	fs.Var(&apiVersions, "api-versions", "an extra API version for .Capabilities.APIVersions (repeatable)")
	namespace := fs.String("namespace", "default", ".Release.Namespace")
	kubeVersion := fs.String("kube-version", "v1.27.0", ".Capabilities.KubeVersion")
	strict := fs.Bool("strict", false, "a reference to a missing value is an error")
	notesOut := fs.String("notes-out", "", "write the rendered templates/NOTES.txt here")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: helm-render [flags] RELEASE CHART_DIR")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() != 2 {
		fs.Usage()
		os.Exit(2)
	}
	release, chartDir := fs.Arg(0), fs.Arg(1)

	meta, values, err := loadChart(chartDir, valueFiles, sets)
	if err == nil {
		err = checkKubeVersion(meta, *kubeVersion)
	}
	var r *renderer
	if err == nil {
		r, err = newRenderer(chartDir, meta, values, releaseInfo{
			Name: release, Namespace: *namespace, Service: "Helm", IsInstall: true, Revision: 1,
		}, *kubeVersion, apiVersions, *strict)
	}
	var out, notes string
	if err == nil {
		out, notes, err = r.renderAll()
	}
	if err == nil && *notesOut != "" {
		err = os.WriteFile(*notesOut, []byte(notes), 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "helm-render: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(out)
}

// loadChart reads Chart.yaml and the values: values.yaml, then the -f files, then the --set values.
func loadChart(dir string, valueFiles, sets []string) (chartMeta, map[string]interface{}, error) {
	var meta chartMeta
	data, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return meta, nil, err
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return meta, nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	if meta.APIVersion != "v2" || meta.Name == "" || meta.Version == "" {
		return meta, nil, fmt.Errorf("Chart.yaml: apiVersion v2, name and version are required")
	}
	values := map[string]interface{}{}
	for _, f := range append([]string{filepath.Join(dir, "values.yaml")}, valueFiles...) {
		v, err := readValues(f)
		if err != nil {
			return meta, nil, err
		}
		mergeValues(values, v)
	}
	for _, s := range sets {
		v, err := parseSet(s)
		if err != nil {
			return meta, nil, fmt.Errorf("--set %s: %v", s, err)
		}
		mergeValues(values, v)
	}
	return meta, values, nil
}

// readValues reads a values file as Helm does: YAML through JSON, so numbers are float64.
func readValues(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return v, nil
}

// mergeValues merges src into dst: maps key by key, anything else replaced, a null deletes the key.
func mergeValues(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sv, srcIsMap := v.(map[string]interface{})
		if !srcIsMap {
			dst[k] = v
			continue
		}
		dv, dstIsMap := dst[k].(map[string]interface{})
		if !dstIsMap {
			dv = map[string]interface{}{}
			dst[k] = dv
		}
		mergeValues(dv, sv)
	}
}

// parseSet turns "a.b=1,c\.d=x" into {a: {b: 1}, "c.d": "x"}. A backslash escapes '.', ',' and '='.
// Lists (a[0]=x) are not supported.
func parseSet(s string) (map[string]interface{}, error) {
	out := map[string]interface{}{}
	for _, assignment := range splitUnescaped(s, ',') {
		kv := splitUnescaped(assignment, '=')
		if len(kv) != 2 || kv[0] == "" {
			return nil, fmt.Errorf("expected key=value in %q", assignment)
		}
		if strings.Contains(kv[0], "[") {
			return nil, fmt.Errorf("list indexes are not supported: %q", kv[0])
		}
		keys := splitUnescaped(kv[0], '.')
		node := out
		for _, k := range keys[:len(keys)-1] {
			k = unescape(k)
			next, ok := node[k].(map[string]interface{})
			if !ok {
				next = map[string]interface{}{}
				node[k] = next
			}
			node = next
		}
		node[unescape(keys[len(keys)-1])] = typedValue(unescape(kv[1]))
	}
	return out, nil
}

// splitUnescaped splits s at each sep not preceded by a backslash, keeping the escapes.
func splitUnescaped(s string, sep byte) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
		} else if s[i] == sep {
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// typedValue types a --set value as Helm does: true, false, null, integers; anything else a string.
func typedValue(v string) interface{} {
	switch v {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && (v == "0" || !strings.HasPrefix(v, "0")) {
		return n
	}
	return v
}

// checkKubeVersion refuses to render for a Kubernetes version outside Chart.yaml's kubeVersion.
func checkKubeVersion(meta chartMeta, kubeVersion string) error {
	v, err := semver.NewVersion(kubeVersion)
	if err != nil {
		return fmt.Errorf("--kube-version %s: %v", kubeVersion, err)
	}
	if meta.KubeVersion == "" {
		return nil
	}
	c, err := semver.NewConstraint(meta.KubeVersion)
	if err != nil {
		return fmt.Errorf("Chart.yaml: kubeVersion %q: %v", meta.KubeVersion, err)
	}
	if !c.Check(v) {
		return fmt.Errorf("chart %s requires kubeVersion %s, which %s is not", meta.Name, meta.KubeVersion, kubeVersion)
	}
	return nil
}
