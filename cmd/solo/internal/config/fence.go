package config

import (
	"errors"
	"net/url"
	"strings"
)

// FenceDriver returns the database/sql driver name and data source for a
// fence DSN: "pgx" for postgres:// and postgresql:// URLs, "sqlite" for
// sqlite:PATH. The drivers themselves are the caller's to register.
func FenceDriver(dsn string) (driver, source string, err error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return "pgx", dsn, nil
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		if path == "" {
			return "", "", errors.New("sqlite: needs a file path, such as sqlite:/var/lib/app/app.db")
		}
		return "sqlite", path, nil
	}
	return "", "", errors.New("want postgres://…, postgresql://… or sqlite:PATH")
}

// RedactDSN returns dsn with the password of a URL replaced by "xxxxx".
func RedactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); !ok {
		return dsn
	}
	u.User = url.UserPassword(u.User.Username(), "xxxxx")
	return u.String()
}
