package rediserr

import (
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// reply is a Redis error reply, as go-redis returns them.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

// The replies are those of redis-server 7.0.15 (tried by hand) and, for
// the ones 7.2 changed, of 7.2's source.
func TestFix(t *testing.T) {
	src := "local x = redis.call('GET', KEYS[1])\nredis.call(\"hset\", KEYS[2], 'a', x)\nredis.pcall('get', KEYS[1])"
	Register("test", src)
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	Register("other", "return 1") // a script registered under another SHA
	for _, tt := range []struct {
		reply, want string
	}{
		{"NOPERM this user has no permissions to run the 'evalsha' command",
			"the ACL user lacks +evalsha; see docs/operations.md#acl"},
		{"NOPERM User solo has no permissions to run the 'client|setinfo' command",
			"the ACL user lacks +client|setinfo; see docs/operations.md#acl"},
		{"NOPERM this user has no permissions to access one of the keys used as arguments",
			"the ACL user's key patterns do not cover solo's keys: add ~PREFIX:* (PREFIX is election.key_prefix, default solo); see docs/operations.md#acl"},
		{"NOPERM this user has no permissions to access one of the channels used as arguments",
			"the ACL user's channel patterns do not cover solo's notice channels: add &PREFIX:* (PREFIX is election.key_prefix, default solo); see docs/operations.md#acl"},
		{"ERR The user executing the script can't run this command or subcommand script: " + sha + ", on @user_script:1.",
			"the ACL user lacks a command run by the test script (it runs get, hset) (`ACL LOG` names it); see docs/operations.md#acl"},
		{"ERR The user executing the script can't run this command or subcommand script: 0000000000000000000000000000000000000000, on @user_script:1.",
			"the ACL user lacks a command run by the Lua script 00000000 (`ACL LOG` names it); see docs/operations.md#acl"},
		{"ERR ACL failure in script: User solo has no permissions to run the 'hset' command script: " + sha + ", on @user_script:2.",
			"the ACL user lacks +hset (run by the test script); see docs/operations.md#acl"},
		{"ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: " + sha + ", on @user_script:1.",
			"the ACL user's key patterns do not cover solo's keys (in the test script): add ~PREFIX:* (PREFIX is election.key_prefix, default solo); see docs/operations.md#acl"},
		{"ERR The user executing the script can't publish to the channel mentioned in the command script: " + sha + ", on @user_script:1.",
			"the ACL user's channel patterns do not cover solo's notice channels (in the test script): add &PREFIX:* (PREFIX is election.key_prefix, default solo); see docs/operations.md#acl"},
		{"ERR Unknown Redis command called from script script: " + sha + ", on @user_script:1.",
			"the server does not know a command run by the test script (it runs get, hset): renamed or disabled (rename-command)? solo needs it"},
		{"ERR unknown command 'EVALSHA', with args beginning with: '0123' '0' ",
			"the server does not know the command EVALSHA: renamed or disabled (rename-command)? solo needs it"},
		{"WRONGPASS invalid username-password pair or user is disabled.",
			"wrong username or password in the Redis URL (redis://USER:PASSWORD@HOST:PORT/DB)"},
		{"NOAUTH Authentication required.",
			"the server requires a password: put it in the Redis URL (redis://USER:PASSWORD@HOST:PORT/DB)"},
		{"ERR DB index is out of range",
			"the database number in the Redis URL (the /DB path) does not exist on this server"},
		{"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
			"the server has no password set: remove it from the Redis URL"},
		{"NOSCRIPT No matching script. Please use EVAL.", ""},
		{"READONLY You can't write against a read only replica.", ""},
		{"LOADING Redis is loading the dataset in memory", ""},
	} {
		if got := Fix(fmt.Errorf("acquire solo:{x}:lease: %w", reply(tt.reply))); got != tt.want {
			t.Errorf("Fix(%q)\n got %q\nwant %q", tt.reply, got, tt.want)
		}
	}
	if got := Fix(errors.New("NOPERM this user has no permissions to run the 'get' command")); got != "" {
		t.Errorf("Fix of a non-Redis error = %q, want empty", got)
	}
}

// TLSFix names the options to check, with the prefix, for the certificate
// failures of a handshake, however go-redis wraps them; nothing else.
func TestTLSFix(t *testing.T) {
	unknown := x509.UnknownAuthorityError{}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{&tls.CertificateVerificationError{Err: unknown}, "the server's certificate does not verify: check redis.tls_ca_file"},
		{fmt.Errorf("dial: %w", unknown), "the server's certificate does not verify: check redis.tls_ca_file"},
		{x509.HostnameError{Host: "h"}, "and redis.tls_server_name (a name it holds"},
		{errors.New("remote error: tls: certificate required"), "the server requires a client certificate: set redis.tls_cert_file and redis.tls_key_file"},
		{errors.New("remote error: tls: bad certificate"), "the server refused the client certificate: check redis.tls_cert_file"},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), ""},
		{nil, ""},
	} {
		got := TLSFix(tt.err, "redis.")
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("TLSFix(%v) = %q, want %q in it", tt.err, got, tt.want)
		}
	}
	if got := Fix(unknown); !strings.Contains(got, "check tls_ca_file") {
		t.Errorf("Fix(%v) = %q, want the URL's option named", unknown, got)
	}
}
