// Package rediserr tells a Redis configuration error from an outage: an
// error reply that retrying cannot cure (an ACL that lacks a command, a key
// or a channel; a wrong or missing password; a command the server does not
// know, renamed or disabled; a database the server does not have; a TLS
// certificate that does not verify), and what to fix, naming the rule where
// the reply says.
//
// Redis 7.0 does not name the command a Lua script was refused ("The user
// executing the script can't run this command or subcommand script: SHA"),
// but names the script by its SHA1: packages register their scripts
// (Register), and Fix lists the commands of the one refused.
package rediserr

import (
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ACLDoc is where the ACL recipe is documented.
const ACLDoc = "docs/operations.md#acl"

// script is a registered Lua script.
type script struct {
	name     string
	commands []string // the commands it calls, lower case, in order of first use
}

var (
	mu      sync.Mutex
	scripts = map[string]script{} // by SHA1, hex
)

// callRE matches a redis.call or redis.pcall of a literal command.
var callRE = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z|]+)['"]`)

// Register records src, the source of the Lua script called name (as in
// "the acquire script"), so that Fix can name it and its commands.
func Register(name, src string) {
	sum := sha1.Sum([]byte(src))
	var cmds []string
	for _, m := range callRE.FindAllStringSubmatch(src, -1) {
		if c := strings.ToLower(m[1]); !slices.Contains(cmds, c) {
			cmds = append(cmds, c)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	scripts[hex.EncodeToString(sum[:])] = script{name: name, commands: cmds}
}

var (
	// Redis 7.0: "NOPERM this user has no permissions to run the 'evalsha'
	// command"; 7.2 and later: "NOPERM User solo has no permissions to run
	// the 'evalsha' command", also inside a script ("ERR ACL failure in
	// script: User solo has no …").
	noPermCmdRE = regexp.MustCompile(`has no permissions to run the '([^']+)' command`)
	// "ERR unknown command 'EVALSHA', with args beginning with: …"
	unknownCmdRE = regexp.MustCompile(`ERR unknown command '([^']+)'`)
	// "ERR unknown subcommand 'SETNAME'. Try CLIENT HELP."
	unknownSubRE = regexp.MustCompile(`ERR unknown subcommand '([^']+)'`)
	// " script: 4a15…, on @user_script:1."
	scriptRE = regexp.MustCompile(`script: ([0-9a-f]{40})`)
)

// Fix returns what to fix when err is a Redis configuration error, else
// "". The text names the refused command (or, for a script on Redis 7.0,
// the script and its commands), or the kind of key or channel, and points
// to the ACL recipe. A TLS handshake that failed over certificates is one
// too (TLSFix), naming the URL's options.
func Fix(err error) string {
	if fix := FixIn(err, "the Redis URL"); fix != "" {
		return fix
	}
	return TLSFix(err, "")
}

// FixIn is Fix, but for the server's replies only, for a program whose
// Redis URL is set where url says (a configuration key, "redis.url"): a
// wrong or missing password, or a database the server does not have,
// names it.
func FixIn(err error, url string) string {
	if err == nil {
		return ""
	}
	if _, ok := errors.AsType[redis.Error](err); !ok {
		return ""
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "ERR AUTH"), strings.Contains(msg, "ERR Client sent AUTH"):
		return "the server has no password set: remove it from " + url
	case strings.Contains(msg, "ERR DB index"), strings.Contains(msg, "ERR invalid DB index"),
		strings.Contains(msg, "ERR SELECT is not allowed in cluster mode"):
		return "the database number in " + url + " (the /DB path) does not exist on this server"
	case strings.Contains(msg, "WRONGPASS"),
		strings.Contains(msg, "ERR invalid password"),
		strings.Contains(msg, "ERR invalid username-password pair"):
		return "wrong username or password in " + url + " (redis://USER:PASSWORD@HOST:PORT/DB)"
	case strings.Contains(msg, "NOAUTH"):
		return "the server requires a password: put it in " + url + " (redis://USER:PASSWORD@HOST:PORT/DB)"
	}
	inScript := scriptRE.FindStringSubmatch(msg)
	scriptName := func() (string, []string) {
		if inScript == nil {
			return "a Lua script", nil
		}
		mu.Lock()
		s, ok := scripts[inScript[1]]
		mu.Unlock()
		if !ok {
			return "the Lua script " + inScript[1][:8], nil
		}
		return "the " + s.name + " script", s.commands
	}
	if m := noPermCmdRE.FindStringSubmatch(msg); m != nil {
		cmd := strings.ToLower(m[1])
		if inScript != nil {
			name, _ := scriptName()
			return "the ACL user lacks +" + cmd + " (run by " + name + "); see " + ACLDoc
		}
		return "the ACL user lacks +" + cmd + "; see " + ACLDoc
	}
	switch {
	case strings.Contains(msg, "no permissions to access one of the keys"),
		strings.Contains(msg, "can't access at least one of the keys"):
		where := ""
		if inScript != nil {
			name, _ := scriptName()
			where = " (in " + name + ")"
		}
		return "the ACL user's key patterns do not cover solo's keys" + where + ": add ~PREFIX:* (PREFIX is election.key_prefix, default solo); see " + ACLDoc
	case strings.Contains(msg, "no permissions to access one of the channels"),
		strings.Contains(msg, "can't publish to the channel"):
		where := ""
		if inScript != nil {
			name, _ := scriptName()
			where = " (in " + name + ")"
		}
		return "the ACL user's channel patterns do not cover solo's notice channels" + where + ": add &PREFIX:* (PREFIX is election.key_prefix, default solo); see " + ACLDoc
	case strings.Contains(msg, "can't run this command or subcommand"):
		// Redis 7.0 inside a script: the command is not named.
		name, cmds := scriptName()
		return "the ACL user lacks a command run by " + name + commandList(cmds) + " (`ACL LOG` names it); see " + ACLDoc
	case strings.Contains(msg, "Unknown Redis command called from script"):
		name, cmds := scriptName()
		return "the server does not know a command run by " + name + commandList(cmds) + ": renamed or disabled (rename-command)? solo needs it"
	case strings.HasPrefix(msg, "NOPERM"):
		return "the ACL user lacks a permission (`ACL LOG` names it); see " + ACLDoc
	}
	if m := unknownCmdRE.FindStringSubmatch(msg); m != nil {
		return "the server does not know the command " + strings.ToUpper(m[1]) + ": renamed or disabled (rename-command)? solo needs it"
	}
	if m := unknownSubRE.FindStringSubmatch(msg); m != nil {
		return "the server does not know the subcommand " + strings.ToUpper(m[1]) + ": renamed or disabled, or an older Redis? solo needs it"
	}
	return ""
}

// commandList is ": it runs a, b, c" for cmds, or "".
func commandList(cmds []string) string {
	if len(cmds) == 0 {
		return ""
	}
	return " (it runs " + strings.Join(cmds, ", ") + ")"
}

// TLSFix returns, for a TLS handshake that failed over certificates (the
// server's does not verify, or the server refused the client's), what to
// fix; else "". prefix goes before the names of the TLS options: "" for
// the URL's own (tls_ca_file), "redis." for solo's configuration keys.
// Retrying cannot cure these either, until the certificates change.
func TLSFix(err error, prefix string) string {
	if err == nil {
		return ""
	}
	_, verify := errors.AsType[*tls.CertificateVerificationError](err)
	// go-redis may hand on the cause without the wrapper.
	_, authority := errors.AsType[x509.UnknownAuthorityError](err)
	_, host := errors.AsType[x509.HostnameError](err)
	_, invalid := errors.AsType[x509.CertificateInvalidError](err)
	if verify || authority || host || invalid {
		return "the server's certificate does not verify: check " + prefix + "tls_ca_file (the authority that signed it; default the system's) and " +
			prefix + "tls_server_name (a name it holds; default the host dialed)"
	}
	// The server's alerts come back as an unexported type (tls.AlertError
	// is QUIC's): match their text.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "remote error: tls: certificate required"):
		return "the server requires a client certificate: set " + prefix + "tls_cert_file and " + prefix + "tls_key_file"
	case strings.Contains(msg, "remote error: tls: unknown certificate authority"),
		strings.Contains(msg, "remote error: tls: bad certificate"),
		strings.Contains(msg, "remote error: tls: expired certificate"):
		return "the server refused the client certificate: check " + prefix + "tls_cert_file and " + prefix +
			"tls_key_file (signed by an authority of the server's --tls-ca-cert-file, not expired)"
	}
	return ""
}
