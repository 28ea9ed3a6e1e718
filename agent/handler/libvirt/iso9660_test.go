package libvirt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/model"
	"github.com/tetherhq/tether/model/testenv"
)

// isoVolume is an ISO 9660 image as a reader sees it.
type isoVolume struct {
	label string
	// files of the root directory, named as Linux's isofs names them by
	// default: lower case, without ";1" and a trailing '.'.
	files map[string][]byte
	when  time.Time // the root directory's recording time
}

// readISO reads an image of one directory back, checking what a reader
// relies on: the descriptors, the path tables, the root directory's
// records, the files' extents within the volume.
func readISO(img []byte) (isoVolume, error) {
	var v isoVolume
	if len(img)%isoSector != 0 || len(img) < (isoFirstSector+2)*isoSector {
		return v, fmt.Errorf("%d bytes: not whole sectors past the descriptors", len(img))
	}
	sector := func(n uint32) ([]byte, error) {
		if int(n+1)*isoSector > len(img) {
			return nil, fmt.Errorf("sector %d is past the image's %d", n, len(img)/isoSector)
		}
		return img[int(n)*isoSector : int(n+1)*isoSector], nil
	}
	pvd, _ := sector(isoFirstSector)
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" || pvd[6] != 1 {
		return v, errors.New("sector 16 is not a primary volume descriptor")
	}
	term, _ := sector(isoFirstSector + 1)
	if term[0] != 255 || string(term[1:6]) != "CD001" {
		return v, errors.New("sector 17 is not the set's terminator")
	}
	both32 := func(b []byte) (uint32, error) {
		le, be := binary.LittleEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
		if le != be {
			return 0, fmt.Errorf("both-endian field %d ≠ %d", le, be)
		}
		return le, nil
	}
	size, err := both32(pvd[80:])
	if err != nil || int(size)*isoSector != len(img) {
		return v, fmt.Errorf("volume space size %d sectors (%v), want the image's %d", size, err, len(img)/isoSector)
	}
	if binary.LittleEndian.Uint16(pvd[128:]) != isoSector || binary.BigEndian.Uint16(pvd[130:]) != isoSector {
		return v, errors.New("logical block size is not 2048")
	}
	v.label = strings.TrimRight(string(pvd[40:72]), " ")
	root := pvd[156:190]
	rootAt, err := both32(root[2:])
	if err != nil {
		return v, err
	}
	rootLen, err := both32(root[10:])
	if err != nil || root[25]&2 == 0 || root[32] != 1 || root[33] != 0 {
		return v, fmt.Errorf("the descriptor's root record %x is not a directory's (%v)", root, err)
	}
	// The path tables name the root too.
	ptLen, err := both32(pvd[132:])
	if err != nil || ptLen != 10 {
		return v, fmt.Errorf("path table size %d (%v), want one entry", ptLen, err)
	}
	for _, t := range []struct {
		at    uint32
		order binary.ByteOrder
	}{{binary.LittleEndian.Uint32(pvd[140:]), binary.LittleEndian}, {binary.BigEndian.Uint32(pvd[148:]), binary.BigEndian}} {
		p, err := sector(t.at)
		if err != nil {
			return v, fmt.Errorf("path table: %w", err)
		}
		if p[0] != 1 || t.order.Uint32(p[2:]) != rootAt || t.order.Uint16(p[6:]) != 1 {
			return v, fmt.Errorf("path table at sector %d: %x, want the root at %d", t.at, p[:10], rootAt)
		}
	}
	if rootLen%isoSector != 0 || int(rootAt)*isoSector+int(rootLen) > len(img) {
		return v, fmt.Errorf("root directory of %d bytes at sector %d", rootLen, rootAt)
	}
	dir := img[int(rootAt)*isoSector : int(rootAt)*isoSector+int(rootLen)]
	v.files = map[string][]byte{}
	for off, i := 0, 0; off < len(dir); i++ {
		n := int(dir[off])
		if n == 0 { // the rest of the sector is padding
			off += isoSector - off%isoSector
			i--
			continue
		}
		if off%isoSector+n > isoSector || n < 34 {
			return v, fmt.Errorf("record at %d of %d bytes crosses a sector or is too short", off, n)
		}
		r := dir[off : off+n]
		off += n
		at, err := both32(r[2:])
		if err != nil {
			return v, err
		}
		length, err := both32(r[10:])
		if err != nil {
			return v, err
		}
		id := string(r[33 : 33+int(r[32])])
		switch i {
		case 0, 1:
			if id != string([]byte{byte(i)}) || at != rootAt || r[25]&2 == 0 {
				return v, fmt.Errorf("record %d is %q at %d, want the root's %q", i, id, at, string([]byte{byte(i)}))
			}
			if i == 0 {
				v.when = time.Date(1900+int(r[18]), time.Month(r[19]), int(r[20]), int(r[21]), int(r[22]), int(r[23]), 0, time.UTC)
			}
			continue
		}
		if r[25]&2 != 0 {
			return v, fmt.Errorf("%s is a directory", id)
		}
		if int(at)*isoSector+int(length) > len(img) {
			return v, fmt.Errorf("%s: %d bytes at sector %d: past the volume", id, length, at)
		}
		// Linux's isofs_name_translate, with the default map=normal.
		name := strings.ToLower(id)
		name = strings.TrimSuffix(strings.TrimSuffix(name, ";1"), ".")
		if _, dup := v.files[name]; dup {
			return v, fmt.Errorf("%s twice", name)
		}
		v.files[name] = img[int(at)*isoSector : int(at)*isoSector+int(length)]
	}
	return v, nil
}

func TestISOImageReadsBack(t *testing.T) {
	many := map[string][]byte{}
	for i := range 60 { // more records than one directory sector holds
		many[fmt.Sprintf("file-%02d-%s", i, strings.Repeat("x", 20))] = fmt.Appendf(nil, "%d\n", i)
	}
	at := time.Date(2024, 2, 29, 13, 14, 15, 0, time.UTC)
	tests := []struct {
		name  string
		files map[string][]byte
	}{
		{"a seed", map[string][]byte{"user-data": []byte("#cloud-config\nhostname: web-1\n"), "meta-data": []byte("instance-id: i-1\n")}},
		{"no files", map[string][]byte{}},
		{"sizes around a sector", map[string][]byte{
			"empty": {}, "one": []byte("1"), "sector": bytes.Repeat([]byte{'s'}, isoSector),
			"sector-and-one": bytes.Repeat([]byte{'t'}, isoSector+1), "network-config": bytes.Repeat([]byte("version: 2\n"), 900),
			"with.ext": []byte("ext"), "under_score": []byte("_"),
		}},
		{"a directory of two sectors", many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img, err := isoImage("cidata", tt.files, at)
			if err != nil {
				t.Fatal(err)
			}
			v, err := readISO(img)
			if err != nil {
				t.Fatal(err)
			}
			if v.label != "cidata" {
				t.Errorf("label %q, want cidata", v.label)
			}
			// busybox's findfs finds no label on a device under 64 KiB.
			if len(img) < 64<<10 {
				t.Errorf("the image is %d bytes, want at least 64 KiB", len(img))
			}
			if !v.when.Equal(at) {
				t.Errorf("recorded at %v, want %v", v.when, at)
			}
			if !maps.EqualFunc(v.files, tt.files, bytes.Equal) {
				t.Errorf("got %d files %v, want %d", len(v.files), keys(v.files), len(tt.files))
			}
			again, _ := isoImage("cidata", tt.files, at)
			if !bytes.Equal(img, again) {
				t.Error("the same files made a different image")
			}
		})
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// blkid, which cloud-init finds its seed with, reads the label and the
// file system's type.
func TestISOImageBlkid(t *testing.T) {
	blkid, err := exec.LookPath("blkid")
	testenv.Need(t, err == nil, "no blkid (cloud-init finds its seed with it): install util-linux")
	img, err := isoImage(SeedLabel, map[string][]byte{"user-data": []byte("#cloud-config\n")}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(blkid, "-p", "-o", "export", path).CombinedOutput()
	if err != nil {
		t.Fatalf("blkid: %v\n%s", err, out)
	}
	for _, want := range []string{"LABEL=cidata", "TYPE=iso9660"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("blkid says\n%s\nwant %s", out, want)
		}
	}
}

func TestISOImageRefusesWhatItCannotHold(t *testing.T) {
	tests := []struct {
		name, label, file, want string
	}{
		{"an empty name", "cidata", "", "want 1 to 30 characters"},
		{"a long name", "cidata", strings.Repeat("a", 31), "want 1 to 30 characters"},
		{"upper case", "cidata", "User-Data", "lower-case letters"},
		{"a path", "cidata", "seed/user-data", "lower-case letters"},
		{"two dots", "cidata", "a.b.c", "at most one '.'"},
		{"a leading dot", "cidata", ".hidden", "at most one '.'"},
		{"no label", "", "user-data", "want 1 to 32 printable ASCII characters"},
		{"a long label", strings.Repeat("l", 33), "user-data", "want 1 to 32 printable ASCII characters"},
		{"a label that is not ASCII", "cïdata", "user-data", "want 1 to 32 printable ASCII characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := isoImage(tt.label, map[string][]byte{tt.file: nil}, time.Now())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestSeedImage(t *testing.T) {
	spec := model.MachineSpec{Name: "lab.web-1", Host: "web-1", Seed: map[string]string{"user-data": "#cloud-config\nhostname: web-1\n"}}
	img, err := seedImage(spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	v, err := readISO(img)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"user-data": "#cloud-config\nhostname: web-1\n", "meta-data": "instance-id: \"lab.web-1\"\nlocal-hostname: \"web-1\"\n"}
	if v.label != "cidata" || len(v.files) != len(want) {
		t.Fatalf("label %q, files %v; want cidata with %d files", v.label, keys(v.files), len(want))
	}
	for name, text := range want {
		if got := string(v.files[name]); got != text {
			t.Errorf("%s: got %q, want %q", name, got, text)
		}
	}

	// The server's meta-data is kept as it is.
	spec.Seed["meta-data"] = "instance-id: mine\n"
	img, err = seedImage(spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if v, err := readISO(img); err != nil || string(v.files["meta-data"]) != "instance-id: mine\n" {
		t.Errorf("meta-data %q (%v), want the spec's", v.files["meta-data"], err)
	}
}
