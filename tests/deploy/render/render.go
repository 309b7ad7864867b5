package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

// helmFuncs are the functions Helm adds to sprig's; include and tpl need
// the template set, so they are bound once it exists.
func helmFuncs(t **template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	// Helm leaves these out: a chart must not read the renderer's machine.
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil || v == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	f["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	f["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := (*t).ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		c, err := (*t).Clone()
		if err != nil {
			return "", err
		}
		c, err = c.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		err = c.Execute(&buf, data)
		return buf.String(), err
	}
	return f
}

// toYAML writes v as Helm's toYaml does: two-space indents, no final newline.
func toYAML(v interface{}) (string, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// parseChart reads every file under templates/ into one set, named
// "<chart>/templates/<file>" as Helm names them.
func parseChart(dir, chart string) (*template.Template, []string, error) {
	var t *template.Template
	t = template.New(chart).Funcs(helmFuncs(&t)).Option("missingkey=zero")
	var names []string
	root := filepath.Join(dir, "templates")
	err := filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		name := chart + "/templates/" + filepath.ToSlash(rel)
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if _, err := t.New(name).Parse(string(text)); err != nil {
			return err
		}
		names = append(names, name)
		return nil
	})
	sort.Strings(names)
	return t, names, err
}

func execute(t *template.Template, name string, top map[string]interface{}) (string, error) {
	data := map[string]interface{}{}
	for k, v := range top {
		data[k] = v
	}
	data["Template"] = map[string]interface{}{
		"Name": name, "BasePath": name[:strings.LastIndex(name, "/")],
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
}

func render(o options, chart string, top map[string]interface{}) error {
	t, names, err := parseChart(o.chart, chart)
	if err != nil {
		return err
	}
	var out, notes strings.Builder
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") {
			continue
		}
		text, err := execute(t, name, top)
		if err != nil {
			return err
		}
		if base == "NOTES.txt" {
			notes.WriteString(text)
			continue
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, strings.TrimSpace(text))
	}
	fmt.Print(out.String())
	if o.notes {
		fmt.Printf("NOTES:\n%s", notes.String())
	}
	return nil
}
