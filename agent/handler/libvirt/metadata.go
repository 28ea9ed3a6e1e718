package libvirt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	lv "github.com/digitalocean/go-libvirt"
)

// MetadataNS is the namespace of the driver's element in a domain's
// <metadata>: <tether:machine xmlns:tether="…"><host>…</host>…</tether:machine>.
const MetadataNS = "https://tether.dev/ns/machine/1"

// metadataKey is the prefix libvirt gives the namespace.
const metadataKey = "tether"

// machineMeta is the driver's element in a domain's metadata: the host
// it was made from, when the driver last started it, and what the driver
// made for it, which Destroy removes.
type machineMeta struct {
	XMLName  xml.Name `xml:"machine"`
	Host     string   `xml:"host"`
	BootedAt string   `xml:"booted-at,omitempty"`
	// Volume is the disk the driver made; Seed its cloud-init seed.
	Volume *metaVolume `xml:"volume"`
	Seed   *metaVolume `xml:"seed"`
	// TFTPRoot is the platform's TFTP root; Files the machine's boot
	// files the driver wrote there (paths relative to it).
	TFTPRoot string   `xml:"tftp-root,omitempty"`
	Files    []string `xml:"file"`
	// SerialLog is the file of the machine's serial console.
	SerialLog string `xml:"serial-log,omitempty"`
}

type metaVolume struct {
	Pool string `xml:"pool,attr"`
	Name string `xml:",chardata"`
}

// bootedAt is when the driver last started the machine (nil if never).
func (m *machineMeta) bootedAt() *time.Time {
	if m == nil || m.BootedAt == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, m.BootedAt)
	if err != nil {
		return nil
	}
	return &t
}

// readMeta finds the driver's element in the inner XML of a domain's
// <metadata>; nil when there is none (a domain made otherwise).
func readMeta(inner string) (*machineMeta, error) {
	dec := xml.NewDecoder(strings.NewReader(inner))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("domain metadata: %w", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Space == MetadataNS && se.Name.Local == "machine" {
			var m machineMeta
			if err := dec.DecodeElement(&m, &se); err != nil {
				return nil, fmt.Errorf("domain metadata: %s: %w", MetadataNS, err)
			}
			return &m, nil
		}
	}
}

// writeMeta replaces the driver's element of dom's metadata, in its
// persistent definition and, when it runs, in the running domain too.
func writeMeta(l *lv.Libvirt, dom lv.Domain, m *machineMeta) error {
	doc, err := xml.Marshal(m)
	if err != nil {
		return err
	}
	active, err := l.DomainIsActive(dom)
	if err != nil {
		return err
	}
	flags := lv.DomainAffectConfig
	if active == 1 {
		flags |= lv.DomainAffectLive
	}
	return l.DomainSetMetadata(dom, int32(lv.DomainMetadataElement), lv.OptString{string(doc)}, lv.OptString{metadataKey}, lv.OptString{MetadataNS}, flags)
}
