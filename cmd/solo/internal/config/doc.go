// Package config is the solo command's configuration: the config.yaml
// file, its SOLO_* environment overrides and their validation.
//
// Load and Parse apply the defaults (DefaultConfig), the file, the
// environment and Validate, in that order; every bad value is an *Error
// that names its key, its value and where it came from (file and line,
// or the environment variable).
package config
