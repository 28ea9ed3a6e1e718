package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The catalogue of built-in kinds. Every attribute of a kind is declared
// here and nowhere else, and every resource of a built-in kind is judged
// by CheckKind against it: by the compiler, by the server when a version
// is uploaded, by handlers before they act (handler.Declare).
// docs/model-language.md lists the same attributes; a test keeps the two
// in step.

// Kinds returns the built-in kinds, sorted by name.
func Kinds() []KindSpec {
	return []KindSpec{cronKind, directoryKind, execKind, fileKind, groupKind, packageKind, repositoryKind, serviceKind, symlinkKind, userKind}
}

// kindIndex finds a kind by name without copying the catalogue: the server
// looks up the kind of every resource of every upload.
var kindIndex = func() map[string]*KindSpec {
	out := map[string]*KindSpec{}
	for _, k := range Kinds() {
		out[k.Kind] = &k
	}
	return out
}()

// LookupKind returns the spec of a built-in kind.
func LookupKind(kind string) (KindSpec, bool) {
	k, ok := lookupKind(kind)
	if !ok {
		return KindSpec{}, false
	}
	return *k, true
}

func lookupKind(kind string) (*KindSpec, bool) {
	k, ok := kindIndex[kind]
	return k, ok
}

// KindNames lists the built-in kinds' names, sorted.
func KindNames() []string {
	out := make([]string, 0, len(kindIndex))
	for _, k := range Kinds() {
		out = append(out, k.Kind)
	}
	return out
}

var (
	pathAttr  = AttrSpec{Name: "path", Type: TypeString, Doc: "absolute path on the host (below the agent's root prefix)", Check: checkAbsPath}
	ownerAttr = AttrSpec{Name: "owner", Type: TypeString, Doc: "user name or numeric uid; unmanaged when unset", Check: checkPrincipal}
	groupAttr = AttrSpec{Name: "group", Type: TypeString, Doc: "group name or numeric gid; unmanaged when unset", Check: checkPrincipal}
)

var fileKind = KindSpec{
	Kind:     "file",
	Identity: "path",
	Doc:      "a regular file with the given content, written atomically",
	Attrs: []AttrSpec{
		pathAttr,
		{Name: "content", Type: TypeString, Doc: "the file's full content; unmanaged when unset (an absent file is created empty)"},
		{Name: "mode", Type: TypeString, Doc: `permission bits in octal, e.g. "0644"; new files get 0644 when unset`, Check: checkMode},
		ownerAttr,
		groupAttr,
	},
}

var directoryKind = KindSpec{
	Kind:     "directory",
	Identity: "path",
	Doc:      "a directory; its parent must exist",
	Attrs: []AttrSpec{
		pathAttr,
		{Name: "mode", Type: TypeString, Doc: `permission bits in octal, e.g. "0755"; new directories get 0755 less the umask when unset`, Check: checkMode},
		ownerAttr,
		groupAttr,
		{Name: "recurse", Type: TypeBool, PurgeOption: true, Doc: "when purged, remove the directory with everything in it; without it only an empty directory is removed"},
	},
}

var symlinkKind = KindSpec{
	Kind:     "symlink",
	Identity: "path",
	Doc:      "a symbolic link pointing at target",
	Attrs: []AttrSpec{
		pathAttr,
		{Name: "target", Type: TypeString, Required: true, Doc: "what the link points at, absolute or relative to the link's directory", Check: checkNonEmptyLine},
		ownerAttr,
		groupAttr,
	},
}

var packageKind = KindSpec{
	Kind:     "package",
	Identity: "name",
	Doc:      "an installed package of the host's package manager",
	Attrs: []AttrSpec{
		{Name: "name", Type: TypeString, Doc: "the package name, as the package manager knows it", Check: checkPackageName},
		{Name: "version", Type: TypeString, Doc: `an exact version to hold, or "latest" to upgrade on every deploy; any installed version is accepted when unset`, Check: checkNonEmptyWord},
		{Name: "provider", Type: TypeString, Doc: "apt, dnf or apk; taken from the host's facts when unset", Check: oneOf("apt", "dnf", "apk")},
	},
}

var serviceKind = KindSpec{
	Kind:     "service",
	Identity: "name",
	Doc:      "a system service (systemd unit, OpenRC or SysV init script)",
	Attrs: []AttrSpec{
		{Name: "name", Type: TypeString, Doc: `the unit name, with or without ".service"`, Check: checkServiceName},
		{Name: "state", Type: TypeString, Doc: `"running" or "stopped"; unmanaged when unset`, Check: oneOf("running", "stopped")},
		{Name: "enabled", Type: TypeBool, Doc: "start at boot; unmanaged when unset"},
		{Name: "reload", Type: TypeString, Doc: `what a change of a subscribed resource does: "restart" (default) or "reload"`, Check: oneOf("restart", "reload")},
	},
}

var userKind = KindSpec{
	Kind:     "user",
	Identity: "name",
	Doc:      "a local user account",
	Attrs: []AttrSpec{
		{Name: "name", Type: TypeString, Doc: "the login name", Check: checkPOSIXName},
		{Name: "uid", Type: TypeNumber, Doc: "numeric user id; chosen by the system when unset", Check: checkID},
		{Name: "group", Type: TypeString, Doc: "primary group name or gid; the system default when unset", Check: checkPrincipal},
		{Name: "groups", Type: TypeStringList, Doc: "supplementary groups, exactly (others are removed); unmanaged when unset", Check: eachString(checkPrincipal)},
		{Name: "home", Type: TypeString, Doc: "home directory (created with the account)", Check: checkAbsPath},
		{Name: "shell", Type: TypeString, Doc: "login shell", Check: checkAbsPath},
		{Name: "comment", Type: TypeString, Doc: "the GECOS field", Check: checkNoNewline},
		{Name: "system", Type: TypeBool, Doc: "create as a system account (uid below 1000); only at creation"},
		{Name: "password", Type: TypeString, Sensitive: true, Doc: "the password hash (crypt(3) format, never clear text); always sensitive", Check: checkPasswordHash},
	},
}

var groupKind = KindSpec{
	Kind:     "group",
	Identity: "name",
	Doc:      "a local group",
	Attrs: []AttrSpec{
		{Name: "name", Type: TypeString, Doc: "the group name", Check: checkPOSIXName},
		{Name: "gid", Type: TypeNumber, Doc: "numeric group id; chosen by the system when unset", Check: checkID},
		{Name: "system", Type: TypeBool, Doc: "create as a system group (gid below 1000); only at creation"},
		{Name: "members", Type: TypeStringList, Doc: "the group's members, exactly (others are removed); unmanaged when unset", Check: eachString(checkPOSIXName)},
	},
}

var execKind = KindSpec{
	Kind:     "exec",
	Identity: "name",
	Doc:      "a command run when a condition says it is needed (creates, unless, onlyif, or a subscribed change)",
	Attrs: []AttrSpec{
		{Name: "name", Type: TypeString, Doc: "a name for the command, unique on the host", Check: checkNonEmptyLine},
		{Name: "command", Type: TypeString, Required: true, Doc: "the command line, run by /bin/sh", Check: checkNonEmpty},
		{Name: "creates", Type: TypeString, Doc: "skip the command when this path exists", Check: checkAbsPath},
		{Name: "unless", Type: TypeString, Doc: "skip the command when this command exits 0", Check: checkNonEmpty},
		{Name: "onlyif", Type: TypeString, Doc: "run the command only when this command exits 0", Check: checkNonEmpty},
		{Name: "refreshonly", Type: TypeBool, Doc: "run only when a subscribed resource changed"},
		{Name: "cwd", Type: TypeString, Doc: "working directory (may be /)", Check: checkAbsDir},
		{Name: "user", Type: TypeString, Doc: "run as this user (name or uid)", Check: checkPrincipal},
		{Name: "env", Type: TypeStringMap, Doc: "environment variables added to the command's", Check: checkEnv},
		{Name: "timeout", Type: TypeNumber, Doc: "seconds before the command is killed (default 300)", Check: checkPositive},
	},
	OneOf:    []string{"creates", "unless", "onlyif", "refreshonly"},
	OneOfWhy: "without a guard every deploy and every verification would run the command again",
}

var cronKind = KindSpec{
	Kind:     "cron",
	Identity: "name",
	Doc:      "a scheduled command, written to /etc/cron.d",
	Attrs: []AttrSpec{
		{Name: "name", Type: TypeString, Doc: "the entry's file name under /etc/cron.d: letters, digits, '-' and '_'", Check: checkCronName},
		{Name: "command", Type: TypeString, Required: true, Doc: "the command line", Check: checkNonEmptyLine},
		{Name: "schedule", Type: TypeString, Required: true, Doc: `five cron fields ("*/5 * * * *") or @hourly, @daily, @weekly, @monthly, @yearly, @reboot`, Check: checkSchedule},
		{Name: "user", Type: TypeString, Doc: "run as this user (default root)", Check: checkPrincipal},
		{Name: "env", Type: TypeStringMap, Doc: "environment lines of the entry (PATH, MAILTO)", Check: checkEnv},
	},
}

var repositoryKind = KindSpec{
	Kind:     "repository",
	Identity: "name",
	Doc:      "a package repository of the host's package manager; packages on the host require the host's repositories",
	Attrs: []AttrSpec{
		{Name: "name", Type: TypeString, Doc: "the repository's file name: letters, digits, '.', '-' and '_'", Check: checkCronName},
		{Name: "url", Type: TypeString, Required: true, Doc: "the repository's base URL", Check: checkURL},
		{Name: "suite", Type: TypeString, Doc: "apt: the distribution (bookworm); dnf: unused", Check: checkNonEmptyWord},
		{Name: "components", Type: TypeStringList, Doc: `apt: the components (["main"])`, Check: eachString(checkNonEmptyWord)},
		{Name: "key", Type: TypeString, Doc: "the ASCII-armored signing key; the repository is trusted by that key only", Check: checkNonEmpty},
		{Name: "enabled", Type: TypeBool, Doc: "whether the repository is used (default true)"},
		{Name: "provider", Type: TypeString, Doc: "apt or dnf; taken from the host's facts when unset", Check: oneOf("apt", "dnf")},
	},
}

func checkMode(v any) error {
	_, err := ParseMode(v.(string))
	return err
}

func checkAbsPath(v any) error { return CheckAbsPath(v.(string)) }

// checkAbsDir is checkAbsPath that also accepts the root directory.
func checkAbsDir(v any) error {
	if v.(string) == "/" {
		return nil
	}
	return CheckAbsPath(v.(string))
}

func checkPrincipal(v any) error {
	s := v.(string)
	if s == "" || strings.ContainsAny(s, ": \t\n") {
		return fmt.Errorf("%q: want a user or group name, or a numeric id", s)
	}
	return nil
}

// eachString applies check to every element of a list of strings.
func eachString(check func(any) error) func(any) error {
	return func(v any) error {
		for _, s := range stringList(v) {
			if err := check(s); err != nil {
				return err
			}
		}
		return nil
	}
}

func oneOf(values ...string) func(any) error {
	return func(v any) error {
		for _, ok := range values {
			if v.(string) == ok {
				return nil
			}
		}
		return fmt.Errorf("%q: want one of %s", v, strings.Join(quoteAll(values), ", "))
	}
}

func quoteAll(values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

func checkNonEmpty(v any) error {
	s := v.(string)
	if strings.TrimSpace(s) == "" {
		return errors.New("must not be empty")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return errors.New("contains a NUL byte")
	}
	return nil
}

func checkNoNewline(v any) error {
	if strings.ContainsAny(v.(string), "\n\r\x00") {
		return fmt.Errorf("%q: must be one line", v)
	}
	return nil
}

func checkNonEmptyLine(v any) error {
	if err := checkNonEmpty(v); err != nil {
		return err
	}
	return checkNoNewline(v)
}

// checkPasswordHash accepts what can stand in /etc/shadow's second field:
// a crypt(3) hash, or a locked/disabled marker ("!", "*", "!$6$…"). Clear
// text cannot be told apart from a hash in general, but a value with no '$'
// that is not a marker is surely not a modern hash.
func checkPasswordHash(v any) error {
	s := v.(string)
	if strings.ContainsAny(s, ":\n\r\x00 ") {
		return fmt.Errorf("a password hash has no ':', spaces or newlines")
	}
	body := strings.TrimLeft(s, "!*")
	if body == "" || strings.HasPrefix(body, "$") {
		return nil
	}
	return fmt.Errorf("want a crypt(3) hash such as $6$salt$… or $y$…, or \"!\" to lock the account; never the clear-text password (make one with: openssl passwd -6)")
}

func checkNonEmptyWord(v any) error {
	s := v.(string)
	if s == "" || strings.ContainsAny(s, " \t\n\r\x00") {
		return fmt.Errorf("%q: want one word without spaces", s)
	}
	return nil
}

func checkPackageName(v any) error {
	s := v.(string)
	if err := checkNonEmptyWord(s); err != nil {
		return err
	}
	if strings.HasPrefix(s, "-") {
		return fmt.Errorf("%q: a package name cannot start with '-'", s)
	}
	return nil
}

func checkServiceName(v any) error {
	s := v.(string)
	if err := checkNonEmptyWord(s); err != nil {
		return err
	}
	if strings.ContainsRune(s, '/') || strings.HasPrefix(s, "-") {
		return fmt.Errorf("%q: want a unit name like nginx or nginx.service", s)
	}
	return nil
}

// checkPOSIXName accepts the portable user and group names of useradd(8):
// a lower-case letter or '_' first, then letters, digits, '_', '-', '.'; at
// most 32 characters, optionally ending in '$'.
func checkPOSIXName(v any) error {
	s := v.(string)
	bad := fmt.Errorf("%q: want a name like www-data: lower-case letters, digits, '_', '-' and '.', starting with a letter or '_', at most 32 characters", s)
	body := strings.TrimSuffix(s, "$")
	if body == "" || len(s) > 32 {
		return bad
	}
	for i, r := range body {
		switch {
		case r >= 'a' && r <= 'z', r == '_':
		case i > 0 && (r >= '0' && r <= '9' || r == '-' || r == '.' || r >= 'A' && r <= 'Z'):
		default:
			return bad
		}
	}
	return nil
}

func checkCronName(v any) error {
	s := v.(string)
	if s == "" || len(s) > 128 {
		return fmt.Errorf("%q: want 1 to 128 letters, digits, '.', '-' and '_'", s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%q: want letters, digits, '.', '-' and '_' only (cron ignores other file names)", s)
		}
	}
	if strings.HasPrefix(s, ".") {
		return fmt.Errorf("%q: must not start with '.'", s)
	}
	return nil
}

func checkURL(v any) error {
	s := v.(string)
	for _, scheme := range []string{"http://", "https://", "file://", "ftp://"} {
		if strings.HasPrefix(s, scheme) && len(s) > len(scheme) && !strings.ContainsAny(s, " \t\n\r\x00") {
			return nil
		}
	}
	return fmt.Errorf("%q: want an http://, https://, ftp:// or file:// URL without spaces", s)
}

// checkID accepts whole numbers from 0 to 2³²−2 (uids and gids).
func checkID(v any) error {
	f, ok := numberValue(v)
	if !ok || f < 0 || f > 4294967294 || f != float64(int64(f)) {
		return fmt.Errorf("%v: want a whole number from 0 to 4294967294", v)
	}
	return nil
}

func checkPositive(v any) error {
	f, ok := numberValue(v)
	if !ok || f <= 0 {
		return fmt.Errorf("%v: want a number above 0", v)
	}
	return nil
}

func checkEnv(v any) error {
	for k, val := range stringMap(v) {
		if k == "" || strings.ContainsAny(k, "= \t\n\x00") {
			return fmt.Errorf("variable name %q: want a name without '=', spaces or NUL", k)
		}
		if strings.ContainsAny(val, "\n\x00") {
			return fmt.Errorf("variable %s: the value must be one line", k)
		}
	}
	return nil
}

var cronSpecials = []string{"@reboot", "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}

// checkSchedule accepts a cron special or five fields made of digits, names,
// '*', ',', '-' and '/'. It checks the shape, not every range: cron itself
// reports the rest, and the agent reports cron's answer.
func checkSchedule(v any) error {
	s := strings.TrimSpace(v.(string))
	if strings.HasPrefix(s, "@") {
		for _, sp := range cronSpecials {
			if s == sp {
				return nil
			}
		}
		return fmt.Errorf("%q: want one of %s", s, strings.Join(cronSpecials, ", "))
	}
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return fmt.Errorf("%q: want five fields (minute hour day month weekday), like \"*/5 * * * *\"", s)
	}
	for _, f := range fields {
		for _, r := range f {
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || strings.ContainsRune("*,-/", r)) {
				return fmt.Errorf("%q: field %q has %q; want digits, names, '*', ',', '-' or '/'", s, f, r)
			}
		}
	}
	return nil
}

// stringList reads a list(string) attribute value: []string, or []any of
// strings as decoded from JSON. Anything else is nil.
func stringList(v any) []string {
	switch l := v.(type) {
	case []string:
		return l
	case []any:
		out := make([]string, 0, len(l))
		for _, e := range l {
			s, _ := e.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}

// stringMap reads a map(string) attribute value: map[string]string, or a
// map of strings as decoded from JSON. Anything else is empty.
func stringMap(v any) map[string]string {
	out := map[string]string{}
	switch m := v.(type) {
	case map[string]string:
		return m
	case map[string]any:
		for k, e := range m {
			out[k], _ = e.(string)
		}
	case Attributes:
		for k, e := range m {
			out[k], _ = e.(string)
		}
	}
	return out
}

// numberValue returns a JSON number as a float64.
func numberValue(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}
