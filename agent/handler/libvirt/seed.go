package libvirt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/tetherhq/tether/model"
)

// SeedLabel is the label of a machine's cloud-init seed: what cloud-init's
// NoCloud datasource looks for (blkid's LABEL) among the machine's disks.
const SeedLabel = "cidata"

// seedVolumeName is the name of a machine's seed volume in its pool.
func seedVolumeName(machine string) string { return machine + ".seed.iso" }

// seedImage is the machine's NoCloud seed: an ISO 9660 image labelled
// cidata holding spec.Seed's files and, when it has none, meta-data
// naming the instance (the machine) and its hostname (the host):
// cloud-init needs one, and tells a first boot by its instance-id.
func seedImage(spec model.MachineSpec, at time.Time) ([]byte, error) {
	files := make(map[string][]byte, len(spec.Seed)+1)
	for name, text := range spec.Seed {
		files[name] = []byte(text)
	}
	if _, ok := files["meta-data"]; !ok {
		files["meta-data"] = fmt.Appendf(nil, "instance-id: %s\nlocal-hostname: %s\n", yamlString(spec.Name), yamlString(spec.Host))
	}
	return isoImage(SeedLabel, files, at)
}

// yamlString quotes s as a YAML scalar: a JSON string is a YAML
// double-quoted one.
func yamlString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// makeSeed puts the seed image into the machine's pool as a raw volume of
// its own, uploaded through libvirt (the agent need not see the
// hypervisor's file system), and records it for undo and Destroy.
func (p *provisioning) makeSeed(ctx context.Context, img []byte) error {
	name := seedVolumeName(p.spec.Name)
	size := uint64(len(img))
	def := libvirtxml.StorageVolume{
		Name:       name,
		Capacity:   &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: size},
		Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: size},
		Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "raw"}},
	}
	doc, err := def.Marshal()
	if err != nil {
		return err
	}
	return p.d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		vol, err := p.createVolume(l, name, func() (lv.StorageVol, error) { return l.StorageVolCreateXML(p.pool, doc, 0) })
		if err != nil {
			return err
		}
		p.meta.Seed = &metaVolume{Pool: p.s.pool, Name: name}
		if err := l.StorageVolUpload(vol, bytes.NewReader(img), 0, size, 0); err != nil {
			return fmt.Errorf("upload %s: %w", name, err)
		}
		return p.usePath(l, vol, &p.data.SeedPath)
	})
}
