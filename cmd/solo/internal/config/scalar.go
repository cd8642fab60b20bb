package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

var durationType = reflect.TypeFor[time.Duration]()

// parseScalar parses text, from the file or the environment, as a value of
// type t. On failure it returns the reason and whether text at least had
// the right form (a duration that is not positive has; "abc" and a bare
// "10" have not), which decides whether a message quotes it.
func parseScalar(t reflect.Type, text string) (v reflect.Value, reason string, ok bool) {
	v = reflect.New(t).Elem()
	if t == durationType {
		if _, err := strconv.ParseInt(text, 10, 64); err == nil {
			return v, `want a duration such as "10s"`, false
		}
		dur, err := time.ParseDuration(text)
		if err != nil {
			return v, `want a duration such as "10s"`, false
		}
		if dur <= 0 {
			return v, "must be positive", true
		}
		v.SetInt(int64(dur))
		return v, "", true
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || v.OverflowInt(n) {
			return v, "want an integer", false
		}
		v.SetInt(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return v, "want a number", false
		}
		v.SetFloat(f)
	case reflect.Bool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return v, "want true or false", false
		}
		v.SetBool(b)
	default:
		return v, fmt.Sprintf("unsupported type %s", t), false
	}
	return v, "", true
}

// wantScalar is the reason given when a list or mapping stands where a
// value of type t belongs.
func wantScalar(t reflect.Type) string {
	switch {
	case t == durationType:
		return `want a duration such as "10s"`
	case t.Kind() == reflect.String:
		return "want a string"
	case t.Kind() == reflect.Bool:
		return "want true or false"
	case t.Kind() == reflect.Float64:
		return "want a number"
	default:
		return "want an integer"
	}
}

func joinKey(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// formatValue shows a leader.ConfigError value as leader does.
func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case time.Duration:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}

// OneLine keeps a message on one line.
func OneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
