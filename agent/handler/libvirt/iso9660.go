package libvirt

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"
)

// An ISO 9660 (ECMA-119) image of one directory of a few small files:
// what a cloud-init NoCloud seed is. It is written in memory, so what the
// files hold (an enrollment token, a password) never touches the agent's
// disk. It has no Joliet or Rock Ridge extensions: names are stored upper
// case as NAME.EXT;1 and read back lower case without the version
// (Linux's isofs does so by default; cloud-init mounts the seed with it),
// so a name is limited to what maps back to itself.

const (
	isoSector = 2048
	// isoFirstSector is where the volume descriptors begin, after the
	// system area.
	isoFirstSector = 16
	// isoMaxName is the longest file name (name and extension, level 2).
	isoMaxName = 30
	// isoPad is the zero sectors that end the volume, as mkisofs pads
	// it: readers that read ahead of what they need find the volume
	// large enough (busybox's volume_id, which finds a label for
	// findfs, gives up on a device under 64 KiB).
	isoPad = 150
)

// isoImage returns an ISO 9660 image labelled label (its volume
// identifier: what blkid reports as LABEL) whose root directory holds
// files, recorded at the time at.
func isoImage(label string, files map[string][]byte, at time.Time) ([]byte, error) {
	if label == "" || len(label) > 32 || strings.IndexFunc(label, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		return nil, fmt.Errorf("iso 9660 label %q: want 1 to 32 printable ASCII characters", label)
	}
	type entry struct {
		id   string // as recorded: NAME.EXT;1
		data []byte
		at   uint32 // first sector
	}
	entries := make([]entry, 0, len(files))
	for name, data := range files {
		id, err := isoFileID(name)
		if err != nil {
			return nil, err
		}
		if len(data) > 1<<31 {
			return nil, fmt.Errorf("iso 9660 file %s: %d bytes: too large for a seed", name, len(data))
		}
		entries = append(entries, entry{id: id, data: data})
	}
	// A directory's records are sorted by identifier (ECMA-119 9.3).
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.id, b.id) })

	// The root directory's records: ".", "..", then the files; a record
	// does not cross a sector.
	recordLen := func(idLen int) int { return 33 + idLen + (idLen+1)%2 }
	dirSectors, used := uint32(1), 2*recordLen(1)
	for _, e := range entries {
		n := recordLen(len(e.id))
		if used+n > isoSector {
			dirSectors, used = dirSectors+1, 0
		}
		used += n
	}
	// Layout: system area, the primary volume descriptor, the set's
	// terminator, the path tables (little-endian, big-endian), the root
	// directory, the files.
	const pvdAt, lPathAt, mPathAt, rootAt = isoFirstSector, isoFirstSector + 2, isoFirstSector + 3, isoFirstSector + 4
	next := rootAt + dirSectors
	for i := range entries {
		entries[i].at = next
		next += uint32((len(entries[i].data) + isoSector - 1) / isoSector)
	}
	next += isoPad
	img := make([]byte, int(next)*isoSector)
	sector := func(n uint32) []byte { return img[int(n)*isoSector : int(n+1)*isoSector] }
	at = at.UTC()

	// The path tables: one entry, the root's, its own parent.
	const pathTableLen = 10
	for _, t := range []struct {
		at    uint32
		order binary.ByteOrder
	}{{lPathAt, binary.LittleEndian}, {mPathAt, binary.BigEndian}} {
		p := sector(t.at)
		p[0] = 1 // the identifier's length
		t.order.PutUint32(p[2:], rootAt)
		t.order.PutUint16(p[6:], 1)
	}

	root := dirRecord{id: "\x00", at: rootAt, size: dirSectors * isoSector, dir: true, when: at}
	dir := img[rootAt*isoSector : (rootAt+dirSectors)*isoSector]
	off := 0
	put := func(r dirRecord) {
		b := r.bytes()
		if off%isoSector+len(b) > isoSector {
			off += isoSector - off%isoSector
		}
		copy(dir[off:], b)
		off += len(b)
	}
	put(root)
	parent := root
	parent.id = "\x01"
	put(parent)
	for _, e := range entries {
		copy(img[int(e.at)*isoSector:], e.data)
		put(dirRecord{id: e.id, at: e.at, size: uint32(len(e.data)), when: at})
	}

	// The primary volume descriptor (ECMA-119 8.4).
	pvd := sector(pvdAt)
	pvd[0], pvd[6] = 1, 1
	copy(pvd[1:6], "CD001")
	padded(pvd[8:40], "LINUX")
	padded(pvd[40:72], label)
	bothEndian32(pvd[80:], next)
	bothEndian16(pvd[120:], 1) // volume set size
	bothEndian16(pvd[124:], 1) // volume sequence number
	bothEndian16(pvd[128:], isoSector)
	bothEndian32(pvd[132:], pathTableLen)
	binary.LittleEndian.PutUint32(pvd[140:], lPathAt)
	binary.BigEndian.PutUint32(pvd[148:], mPathAt)
	copy(pvd[156:190], root.bytes())
	for _, f := range [][2]int{{190, 318}, {318, 446}, {446, 574}, {574, 702}, {702, 739}, {739, 776}, {776, 813}} {
		padded(pvd[f[0]:f[1]], "")
	}
	padded(pvd[574:702], "TETHER")
	stamp := []byte(at.Format("20060102150405") + fmt.Sprintf("%02d", at.Nanosecond()/1e7) + "\x00")
	copy(pvd[813:], stamp) // created
	copy(pvd[830:], stamp) // modified
	copy(pvd[847:], "0000000000000000\x00")
	copy(pvd[864:], "0000000000000000\x00")
	pvd[881] = 1 // file structure version

	// The set's terminator.
	term := sector(pvdAt + 1)
	term[0], term[6] = 255, 1
	copy(term[1:6], "CD001")
	return img, nil
}

// isoFileID is the identifier a file of name is recorded under. A name is
// lower-case letters, digits, '-' and '_', with at most one '.', so that a
// reader that lower-cases names and drops the version reads it back.
func isoFileID(name string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("iso 9660 file name %q: %s", name, why)
	}
	if name == "" || len(name) > isoMaxName {
		return "", bad(fmt.Sprintf("want 1 to %d characters", isoMaxName))
	}
	if strings.Count(name, ".") > 1 || name[0] == '.' {
		return "", bad("want at most one '.', not first")
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}); i >= 0 {
		return "", bad("want lower-case letters, digits, '-', '_' and '.'")
	}
	id := strings.ToUpper(name)
	if !strings.Contains(id, ".") {
		id += "."
	}
	return id + ";1", nil
}

// dirRecord is a directory record (ECMA-119 9.1).
type dirRecord struct {
	id   string // "\x00" is the directory itself, "\x01" its parent
	at   uint32 // first sector
	size uint32
	dir  bool
	when time.Time
}

func (r dirRecord) bytes() []byte {
	n := 33 + len(r.id)
	if len(r.id)%2 == 0 {
		n++ // a padding byte keeps records at even lengths
	}
	b := make([]byte, n)
	b[0] = byte(n)
	bothEndian32(b[2:], r.at)
	bothEndian32(b[10:], r.size)
	t := r.when
	copy(b[18:25], []byte{byte(t.Year() - 1900), byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second()), 0})
	if r.dir {
		b[25] = 2
	}
	bothEndian16(b[28:], 1) // volume sequence number
	b[32] = byte(len(r.id))
	copy(b[33:], r.id)
	return b
}

// padded fills b with s, then spaces.
func padded(b []byte, s string) {
	copy(b, s)
	for i := len(s); i < len(b); i++ {
		b[i] = ' '
	}
}

func bothEndian16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
}

func bothEndian32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
}
