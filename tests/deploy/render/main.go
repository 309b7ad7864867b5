// Command render renders a Helm chart the way `helm template` does, for the
// tests on machines without Helm (Helm is not in Debian's archive). It
// covers what Sundial's chart uses: Go's text/template with sprig's
// functions, Helm's include, required, toYaml, tpl and lookup (which finds
// nothing, as in `helm template`), values merged from values.yaml and -f
// files, .Release, .Chart and .Capabilities.KubeVersion, and NOTES.txt.
//
// Usage: render [-n namespace] [-f values.yaml]... [--notes] NAME CHART
//
// Prints the manifests as `helm template` does (each document after
// "# Source: <chart>/templates/<file>"); with --notes, prints NOTES.txt
// after them. Exits 1 with the template's error.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

type options struct {
	namespace string
	files     valueFiles
	notes     bool
	name      string
	chart     string
}

func parseArgs(args []string) (options, error) {
	o := options{namespace: "default"}
	var rest []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-n", "--namespace", "-f", "--values":
			if i+1 == len(args) {
				return o, fmt.Errorf("%s needs a value", args[i])
			}
			if args[i] == "-f" || args[i] == "--values" {
				o.files = append(o.files, args[i+1])
			} else {
				o.namespace = args[i+1]
			}
			i++
		case "--notes":
			o.notes = true
		default:
			rest = append(rest, args[i])
		}
	}
	if len(rest) != 2 {
		return o, fmt.Errorf("usage: render [-n NS] [-f VALUES]... [--notes] NAME CHART")
	}
	o.name, o.chart = rest[0], rest[1]
	return o, nil
}

func readYAML(path string) (map[string]interface{}, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	if err := yaml.Unmarshal(text, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// merge lays over onto base as Helm does: maps merge key by key, anything
// else replaces, and a null removes the key.
func merge(base, over map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		b, bok := out[k].(map[string]interface{})
		o, ook := v.(map[string]interface{})
		if bok && ook {
			out[k] = merge(b, o)
		} else {
			out[k] = v
		}
	}
	return out
}

func run(args []string) error {
	o, err := parseArgs(args)
	if err != nil {
		return err
	}
	meta, err := readYAML(filepath.Join(o.chart, "Chart.yaml"))
	if err != nil {
		return err
	}
	values, err := readYAML(filepath.Join(o.chart, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range o.files {
		over, err := readYAML(f)
		if err != nil {
			return err
		}
		values = merge(values, over)
	}
	name := fmt.Sprint(meta["name"])
	top := map[string]interface{}{
		"Values": values,
		"Release": map[string]interface{}{
			"Name": o.name, "Namespace": o.namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Chart": map[string]interface{}{
			"Name": name, "Version": meta["version"], "AppVersion": meta["appVersion"],
		},
		"Capabilities": map[string]interface{}{
			"KubeVersion": map[string]interface{}{"Version": "v1.30.0", "Major": "1", "Minor": "30"},
		},
	}
	return render(o, name, top)
}
