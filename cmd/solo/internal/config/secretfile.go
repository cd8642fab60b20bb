package config

import (
	"bytes"
	"os"
	"strconv"
)

// readSecretFiles reads the keys given as files (redis.url_file,
// fence.dsn_file) into the keys they stand for, so that every later check
// and command sees one value; the file key is emptied once read. A file that cannot be read, is empty, or is
// given beside its key is an error naming the file key; its contents are
// never shown.
func readSecretFiles(c *Config) error {
	for _, f := range []struct {
		key, fileKey string
		value, file  *string
	}{
		{"redis.url", "redis.url_file", &c.Redis.URL, &c.Redis.URLFile},
		{"fence.dsn", "fence.dsn_file", &c.Fence.DSN, &c.Fence.DSNFile},
	} {
		if *f.file == "" {
			continue
		}
		if *f.value != "" {
			return &Error{Key: f.fileKey, Value: strconv.Quote(*f.file), Reason: "give " + f.key + " or " + f.fileKey + ", not both"}
		}
		b, err := os.ReadFile(*f.file)
		if err != nil {
			return &Error{Key: f.fileKey, Value: strconv.Quote(*f.file), Reason: err.Error()}
		}
		b = bytes.TrimRight(b, "\r\n")
		if len(bytes.TrimSpace(b)) == 0 {
			return &Error{Key: f.fileKey, Value: strconv.Quote(*f.file), Reason: "the file is empty: it must hold the " + f.key}
		}
		*f.value, *f.file = string(b), "" // read: the key it stands for holds it now
	}
	return nil
}
