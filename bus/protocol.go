package bus

import (
	"fmt"
	"strconv"
	"strings"
)

// Protocol is the version of the protocol between server and agents that
// this build speaks, "major.minor". A minor version adds fields and kinds
// that the other side may ignore (a server tolerates agents of any minor
// version of its major, older or newer); a major version changes what an
// existing kind means, and a server refuses agents of another major.
//
// Minor versions: 1.0, agents before versions were reported (they say
// none); 1.1, hello and heartbeats carry the agent's version and protocol;
// 1.2, desired state (a diff or the full state) may carry the deploy that
// follows it; 1.3, machine commands and reports (an agent serving a
// platform).
const Protocol = "1.3"

// ProtocolMajor is the major version of Protocol.
const ProtocolMajor = 1

// ParseProtocol reads a protocol version, "major.minor"; "" is 1.0, the
// protocol of agents older than versions.
func ParseProtocol(v string) (major, minor int, err error) {
	if v == "" {
		return 1, 0, nil
	}
	ma, mi, ok := strings.Cut(v, ".")
	major, err1 := strconv.Atoi(ma)
	minor, err2 := strconv.Atoi(mi)
	if !ok || err1 != nil || err2 != nil || major < 0 || minor < 0 || len(v) > 16 {
		return 0, 0, fmt.Errorf("protocol version %q is not major.minor", v)
	}
	return major, minor, nil
}

// ProtocolHas says whether an agent speaking v, of this major, speaks
// minor version minor or a later one: whether it understands what minor
// added.
func ProtocolHas(v string, minor int) bool {
	major, m, err := ParseProtocol(v)
	return err == nil && major == ProtocolMajor && m >= minor
}

// CheckProtocol says whether a server speaking Protocol takes an agent
// speaking v: nil when it does, else why not, for the agent's operator.
func CheckProtocol(v string) error {
	major, _, err := ParseProtocol(v)
	if err != nil {
		return err
	}
	if major != ProtocolMajor {
		return fmt.Errorf("the agent speaks protocol %s and this server %s: a server takes agents of protocol %d.x only; "+
			"install an agent of the server's release line", v, Protocol, ProtocolMajor)
	}
	return nil
}
