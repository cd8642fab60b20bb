package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlDecoder decodes a yaml.Node tree onto a Config, field by field, so
// that it can name the full key path and line of an unknown key, tell an
// omitted key from a zero one, and parse durations strictly. (yaml.v3's
// KnownFields reports only the Go type of an unknown key, and decodes a
// null or empty duration as an explicit zero.)
//
// The walk, not Decoder.KnownFields(true), because KnownFields reports an
// unknown key in two lines, by Go type, with no file or key path, and
// gives no line for values Validate refuses later (the messages
// TestParse_Errors checks); the walk also lists the keys for applyEnv
// and EnvVars (configLeaves). yaml.v3 refuses duplicate keys either way.
type yamlDecoder struct {
	file  string
	lines map[string]int  // key path → line of the key
	given map[string]bool // key paths of the scalars given a value
}

var yamlErrorLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (d *yamlDecoder) decodeFile(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return d.syntaxError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return &Error{File: d.file, Line: extra.Line, Reason: "more than one YAML document"}
	} else if !errors.Is(err, io.EOF) {
		return d.syntaxError(err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	return d.decode(doc.Content[0], "", reflect.ValueOf(c).Elem())
}

func (d *yamlDecoder) syntaxError(err error) error {
	msg := OneLine(err.Error())
	if m := yamlErrorLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: d.file, Line: line, Reason: m[2]}
	}
	return &Error{File: d.file, Reason: strings.TrimPrefix(msg, "yaml: ")}
}

// line returns the line of key in the file, or for a key a job does not
// give, the line of the job.
func (d *yamlDecoder) line(key string) (int, bool) {
	if line, ok := d.lines[key]; ok {
		return line, true
	}
	if item, _, ok := strings.Cut(key, "]."); ok && strings.HasPrefix(key, "jobs[") {
		line, ok := d.lines[item+"]"]
		return line, ok
	}
	return 0, false
}

func (d *yamlDecoder) fail(n *yaml.Node, key, value, reason string) error {
	return &Error{File: d.file, Line: n.Line, Key: key, Value: value, Reason: reason}
}

// decode sets v from n. A null value, or an empty one for anything but a
// string, leaves v (the default) alone.
func (d *yamlDecoder) decode(n *yaml.Node, key string, v reflect.Value) error {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	switch {
	case v.Kind() == reflect.Struct:
		return d.mapping(n, key, v)
	case v.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.fail(n, key, "", "want a list")
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			k := fmt.Sprintf("%s[%d]", key, i)
			d.lines[k] = item.Line
			if err := d.decode(item, k, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return d.fail(n, key, "", wantScalar(v.Type()))
	}
	if n.Value == "" && v.Kind() != reflect.String {
		return nil
	}
	parsed, reason, ok := parseScalar(v.Type(), n.Value)
	if reason != "" {
		shown := n.Value
		if !ok && n.ShortTag() == "!!str" {
			shown = strconv.Quote(n.Value)
		}
		return d.fail(n, key, shown, reason)
	}
	v.Set(parsed)
	d.given[key] = true
	return nil
}

func (d *yamlDecoder) mapping(n *yaml.Node, key string, v reflect.Value) error {
	if n.Kind != yaml.MappingNode {
		if key == "" {
			return d.fail(n, "", "", "want a mapping at the top level")
		}
		return d.fail(n, key, "", "want a mapping")
	}
	fields := yamlFields(v.Type())
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		k := joinKey(key, kn.Value)
		index, known := fields[kn.Value]
		if kn.Kind != yaml.ScalarNode || !known {
			reason := "unknown key " + k
			if near := Nearest(kn.Value, slices.Collect(maps.Keys(fields))); near != "" {
				reason += " (did you mean " + joinKey(key, near) + "?)"
			}
			return d.fail(kn, "", "", reason)
		}
		if first, dup := seen[kn.Value]; dup {
			return d.fail(kn, "", "", fmt.Sprintf("duplicate key %s (first at line %d)", k, first))
		}
		seen[kn.Value] = kn.Line
		d.lines[k] = kn.Line
		if err := d.decode(vn, k, v.FieldByIndex(index)); err != nil {
			return err
		}
	}
	return nil
}
