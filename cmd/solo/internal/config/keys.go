package config

import (
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// leaf is a scalar key of the configuration, which an environment variable
// can override.
type leaf struct {
	key   string // election.ttl
	env   string // SOLO_ELECTION_TTL
	index []int  // field index path in Config
}

// configLeaves lists the scalar keys of Config in field order.
func configLeaves() []leaf {
	var leaves []leaf
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, inline, ok := yamlName(t, f)
			if !ok {
				continue
			}
			idx := append(append([]int(nil), index...), i)
			switch {
			case inline:
				walk(f.Type, prefix, idx)
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, joinKey(prefix, name), idx)
			case f.Type.Kind() == reflect.Slice:
				// Lists (jobs) come from the file only.
			default:
				key := joinKey(prefix, name)
				env := EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
				leaves = append(leaves, leaf{key: key, env: env, index: idx})
			}
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return leaves
}

// yamlFields maps the yaml keys of a struct type, inline fields included,
// to field index paths.
func yamlFields(t reflect.Type) map[string][]int {
	fields := make(map[string][]int)
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline, ok := yamlName(t, f)
		if !ok {
			continue
		}
		if inline {
			for k, idx := range yamlFields(f.Type) {
				fields[k] = append([]int{i}, idx...)
			}
			continue
		}
		fields[name] = []int{i}
	}
	return fields
}

// libraryKeys are the file's keys of the library types that Config holds.
// The libraries carry no yaml tags (the configuration file is solo's, not
// theirs), so solo names their fields here; each key is the field's name in
// snake case, as leader.ConfigError.Field reports it.
// TestLibraryKeys_EveryField checks that every exported field has one.
var libraryKeys = map[reflect.Type]map[string]string{
	reflect.TypeFor[leader.Config](): {
		"Name": "name", "ID": "id", "KeyPrefix": "key_prefix", "TTL": "ttl",
		"RenewInterval": "renew_interval", "RenewDeadline": "renew_deadline",
		"RetryInterval": "retry_interval", "ResignCooldown": "resign_cooldown",
		"ShutdownTimeout": "shutdown_timeout", "Drift": "drift",
		"MinReplicas": "min_replicas", "ReplicaTimeout": "replica_timeout",
		"Value": "value",
	},
	reflect.TypeFor[worker.Policy](): {
		"MaxFailures": "max_failures", "RestartBackoff": "restart_backoff",
		"RestartBackoffMax": "restart_backoff_max", "MaxFailedTerms": "max_failed_terms",
	},
	reflect.TypeFor[worker.SpreadConfig](): {
		"Heartbeat": "heartbeat", "MemberTTL": "member_ttl", "MinHold": "min_hold",
	},
}

// yamlName returns the file key of field f of struct type t (libraryKeys
// for a library type, else its yaml tag), whether it is inlined, and false
// for fields the file does not have.
func yamlName(t reflect.Type, f reflect.StructField) (name string, inline, ok bool) {
	if !f.IsExported() {
		return "", false, false
	}
	if keys, lib := libraryKeys[t]; lib {
		name, ok := keys[f.Name]
		return name, false, ok
	}
	tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if tag == "-" {
		return "", false, false
	}
	if f.Anonymous && f.Type.Kind() == reflect.Struct && strings.Contains(","+opts+",", ",inline,") {
		return "", true, true
	}
	if tag == "" {
		tag = strings.ToLower(f.Name)
	}
	return tag, false, true
}

// MarshalYAML writes c in the file's format, with the keys Load reads
// (libraryKeys for the library types, which yaml.Marshal alone would
// write under their lowercased Go names).
func (c Config) MarshalYAML() (any, error) {
	return yamlNode(reflect.TypeFor[Config](), reflect.ValueOf(c))
}

// yamlNode returns v, of type t, as a YAML node: structs field by field
// under their file keys (yamlName), lists item by item, scalars as
// yaml.v3 writes them (a time.Duration as 10s).
func yamlNode(t reflect.Type, v reflect.Value) (*yaml.Node, error) {
	switch t.Kind() {
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for i := range t.NumField() {
			f := t.Field(i)
			name, inline, ok := yamlName(t, f)
			if !ok {
				continue
			}
			c, err := yamlNode(f.Type, v.Field(i))
			if err != nil {
				return nil, err
			}
			if inline {
				n.Content = append(n.Content, c.Content...)
				continue
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, c)
		}
		return n, nil
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			c, err := yamlNode(t.Elem(), v.Index(i))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
		}
		return n, nil
	default:
		n := new(yaml.Node)
		if err := n.Encode(v.Interface()); err != nil {
			return nil, err
		}
		return n, nil
	}
}
