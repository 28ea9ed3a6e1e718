package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/tetherhq/tether/model"
)

// diskFormat is the format of the disks the driver makes.
const diskFormat = "qcow2"

// undoTimeout bounds undoing a provisioning that failed, which goes on
// when the caller's context has ended.
const undoTimeout = 2 * time.Minute

// Provision makes the machine spec describes and starts it: it renders
// the domain's XML from the template (spec.Template, else the driver's
// own), makes its disk in the pool (empty, or a copy of the gold image
// spec.Boot.Image: a volume's name in the pool, or the path of a volume
// libvirt knows) and, for spec.Seed, its cloud-init seed (a volume beside
// the disk, which the domain has as a read-only cdrom), writes its boot
// files, defines the domain and starts it.
// A machine of that name made from the same host is reported as it is.
// When a step fails, what the earlier ones made is removed and the error
// names the step.
func (d *Driver) Provision(ctx context.Context, spec model.MachineSpec) (model.InstanceState, error) {
	if err := spec.Validate(); err != nil {
		return model.InstanceState{}, fmt.Errorf("provision: %w", err)
	}
	s, err := readSettings(spec.Settings)
	if err != nil {
		return model.InstanceState{}, fmt.Errorf("provision %s: %w", spec.Name, err)
	}
	if s.uri != "" && s.uri != d.uri {
		return model.InstanceState{}, fmt.Errorf("provision %s: setting uri: %s, but this driver serves %s", spec.Name, s.uri, d.uri)
	}
	dom, found, err := d.find(ctx, spec.Name)
	if err != nil {
		return model.InstanceState{}, fmt.Errorf("provision %s: %w", spec.Name, err)
	}
	if found {
		st, meta, err := d.describe(ctx, dom)
		switch {
		case err != nil:
			return st, fmt.Errorf("provision %s: %w", spec.Name, err)
		case meta == nil:
			return st, fmt.Errorf("provision %s: a domain %s not made by tether is already on %s: rename or remove it", spec.Name, spec.Name, d.uri)
		case meta.Host != spec.Host:
			return st, fmt.Errorf("provision %s: domain %s on %s was made from host %s, not %s", spec.Name, spec.Name, d.uri, meta.Host, spec.Host)
		}
		return st, nil
	}
	p := &provisioning{d: d, spec: spec, s: s}
	st, err := p.run(ctx)
	if err != nil {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		if uerr := p.undo(uctx); uerr != nil {
			return st, fmt.Errorf("provision %s: %w; undoing it: %w", spec.Name, err, uerr)
		}
		return st, fmt.Errorf("provision %s: %w", spec.Name, err)
	}
	return st, nil
}

// provisioning is one Provision under way: what it made so far, which
// undo removes.
type provisioning struct {
	d    *Driver
	spec model.MachineSpec
	s    settings

	pool    lv.StoragePool
	meta    machineMeta
	data    TemplateData
	doc     string
	madeDir string   // the machine's TFTP directory, made here
	files   []string // written under the TFTP root
	dom     *lv.Domain
	started bool
}

func (p *provisioning) run(ctx context.Context) (model.InstanceState, error) {
	d, spec, s := p.d, p.spec, p.s
	p.meta = machineMeta{Host: spec.Host, SerialLog: filepath.Join(s.logDir, spec.Name+"-serial.log")}
	var poolPath string
	err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		var err error
		p.pool, err = l.StoragePoolLookupByName(s.pool)
		if isCode(err, lv.ErrNoStoragePool) {
			return fmt.Errorf("storage pool %s not found on %s: define one (virsh pool-define-as %s dir --target /var/lib/libvirt/images && virsh pool-start %s) or set the platform's pool", s.pool, d.uri, s.pool, s.pool)
		}
		if err != nil {
			return err
		}
		if active, err := l.StoragePoolIsActive(p.pool); err != nil {
			return err
		} else if active != 1 {
			return fmt.Errorf("storage pool %s on %s is not active: start it (virsh pool-start %s)", s.pool, d.uri, s.pool)
		}
		doc, err := l.StoragePoolGetXMLDesc(p.pool, 0)
		if err != nil {
			return err
		}
		var def libvirtxml.StoragePool
		if err := def.Unmarshal(doc); err != nil {
			return err
		}
		if def.Target != nil {
			poolPath = def.Target.Path
		}
		return nil
	})
	if err != nil {
		return model.InstanceState{}, fmt.Errorf("pool: %w", err)
	}

	volName := spec.Name + "." + diskFormat
	p.data = TemplateData{
		Name: spec.Name, Host: spec.Host,
		MemoryMiB: s.memoryMiB, CPUs: s.cpus, DomainType: s.domainType,
		DiskPath: filepath.Join(poolPath, volName), DiskFormat: diskFormat,
		Network: s.network, NetworkBoot: spec.Boot.Network,
		SerialLog: p.meta.SerialLog,
	}
	if !spec.Boot.Network {
		p.data.Kernel, p.data.Initrd, p.data.Cmdline = spec.Boot.Kernel, spec.Boot.Initrd, spec.Boot.Cmdline
	}
	if spec.Boot.Network || len(spec.Files) > 0 {
		if s.tftpRoot == "" {
			return model.InstanceState{}, errors.New("files: a network boot or boot files need the platform's tftp_root setting: a directory QEMU can read")
		}
		p.meta.TFTPRoot = s.tftpRoot
		p.data.TFTPRoot = filepath.Join(s.tftpRoot, spec.Name)
	}
	// The seed is made first, so that a seed that cannot be is refused
	// before anything is made.
	var seed []byte
	if len(spec.Seed) > 0 {
		if seed, err = seedImage(spec, time.Now()); err != nil {
			return model.InstanceState{}, fmt.Errorf("seed: %w", err)
		}
		p.data.SeedPath = filepath.Join(poolPath, seedVolumeName(spec.Name))
	}
	if err := p.render(); err != nil {
		return model.InstanceState{}, err // says "domain template"
	}

	if err := p.makeVolume(ctx, volName); err != nil {
		return model.InstanceState{}, fmt.Errorf("volume: %w", err)
	}
	if seed != nil {
		if err := p.makeSeed(ctx, seed); err != nil {
			return model.InstanceState{}, fmt.Errorf("seed: %w", err)
		}
	}
	if err := p.writeFiles(); err != nil {
		return model.InstanceState{}, fmt.Errorf("files: %w", err)
	}

	err = d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		dom, err := l.DomainDefineXMLFlags(p.doc, lv.DomainDefineValidate)
		if err != nil {
			return err
		}
		p.dom = &dom
		return writeMeta(l, dom, &p.meta)
	})
	if err != nil {
		return model.InstanceState{}, fmt.Errorf("define: %w", err)
	}
	err = d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
		if err := l.DomainCreate(*p.dom); err != nil {
			return err
		}
		p.started = true
		p.meta.BootedAt = time.Now().UTC().Format(time.RFC3339Nano)
		return writeMeta(l, *p.dom, &p.meta)
	})
	if err != nil {
		return model.InstanceState{}, fmt.Errorf("start: %w", err)
	}
	st, _, err := d.describe(ctx, *p.dom)
	if err != nil {
		return st, fmt.Errorf("report: %w", err)
	}
	return st, nil
}

// render renders the domain's XML and checks it is a domain of the
// machine's name.
func (p *provisioning) render() error {
	tmpl := p.spec.Template
	if tmpl == "" {
		tmpl = defaultTemplate
	}
	doc, err := Render(tmpl, p.data)
	if err != nil {
		return err
	}
	dom, err := checkDomain(doc, p.spec.Name)
	if err != nil {
		return err
	}
	if p.data.SeedPath != "" && !slices.ContainsFunc(dom.Devices.Disks, func(d libvirtxml.DomainDisk) bool {
		return d.Source != nil && d.Source.File != nil && d.Source.File.File == p.data.SeedPath
	}) {
		return fmt.Errorf("domain template: the machine has a cloud-init seed, but the domain has no disk of it: add a read-only cdrom of {{.SeedPath}} (as the driver's own template does)")
	}
	p.doc = doc
	return nil
}

// makeVolume makes the machine's disk: an empty sparse one, or a copy of
// the gold image, at least disk_gib large.
func (p *provisioning) makeVolume(ctx context.Context, name string) error {
	d, s, image := p.d, p.s, p.spec.Boot.Image
	capacity := uint64(s.diskGiB) << 30
	var src *lv.StorageVol
	if image != "" {
		err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
			var vol lv.StorageVol
			var err error
			if filepath.IsAbs(image) {
				vol, err = l.StorageVolLookupByPath(image)
			} else {
				vol, err = l.StorageVolLookupByName(p.pool, image)
			}
			if isCode(err, lv.ErrNoStorageVol) {
				if filepath.IsAbs(image) {
					return fmt.Errorf("gold image %s is not a volume of a storage pool on %s: put it in one (and virsh pool-refresh it)", image, d.uri)
				}
				return fmt.Errorf("gold image %s is not a volume of storage pool %s on %s", image, s.pool, d.uri)
			}
			if err != nil {
				return err
			}
			_, size, _, err := l.StorageVolGetInfo(vol)
			if err != nil {
				return err
			}
			capacity = max(capacity, size)
			src = &vol
			return nil
		})
		if err != nil {
			return err
		}
	}
	def := libvirtxml.StorageVolume{
		Name:       name,
		Capacity:   &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: capacity},
		Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: 0},
		Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: diskFormat}},
	}
	doc, err := def.Marshal()
	if err != nil {
		return err
	}
	timeout := callTimeout
	if src != nil {
		timeout = copyTimeout
	}
	err = d.call(ctx, timeout, func(l *lv.Libvirt) error {
		vol, err := p.createVolume(l, name, func() (lv.StorageVol, error) {
			if src != nil {
				return l.StorageVolCreateXMLFrom(p.pool, doc, *src, 0)
			}
			return l.StorageVolCreateXML(p.pool, doc, 0)
		})
		if err != nil {
			return err
		}
		p.meta.Volume = &metaVolume{Pool: s.pool, Name: name}
		// A copy is as large as its image: grow it to capacity.
		if src != nil {
			if _, size, _, err := l.StorageVolGetInfo(vol); err != nil {
				return err
			} else if size < capacity {
				if err := l.StorageVolResize(vol, capacity, 0); err != nil {
					return fmt.Errorf("resize to %d GiB: %w", s.diskGiB, err)
				}
			}
		}
		return p.usePath(l, vol, &p.data.DiskPath)
	})
	return err
}

// usePath sets a path of the template's data (the disk's, the seed's) to
// where libvirt put vol, and renders the domain again when it moved.
func (p *provisioning) usePath(l *lv.Libvirt, vol lv.StorageVol, field *string) error {
	path, err := l.StorageVolGetPath(vol)
	if err != nil {
		return err
	}
	if path != *field {
		*field = path
		return p.render()
	}
	return nil
}

// createVolume makes a volume of the machine's in its pool with create,
// saying what to do when an earlier machine left one of that name.
func (p *provisioning) createVolume(l *lv.Libvirt, name string, create func() (lv.StorageVol, error)) (lv.StorageVol, error) {
	vol, err := create()
	if isCode(err, lv.ErrStorageVolExist) {
		pool := p.s.pool
		return vol, fmt.Errorf("volume %s is already in storage pool %s on %s, left by an earlier machine: remove it (virsh vol-delete --pool %s %s)", name, pool, p.d.uri, pool, name)
	}
	return vol, err
}

// writeFiles writes the machine's boot files into its own directory under
// the TFTP root, and links a network boot's kernel and initrd there under
// their base names.
func (p *provisioning) writeFiles() error {
	if p.data.TFTPRoot == "" {
		return nil
	}
	root, name := p.s.tftpRoot, p.spec.Name
	paths := slices.Sorted(maps.Keys(p.spec.Files))
	for _, path := range paths {
		if !filepath.IsLocal(path) {
			return fmt.Errorf("file %q: want a relative path within the machine's TFTP directory", path)
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	switch err := r.Mkdir(name, 0o755); {
	case err == nil:
		p.madeDir = name
	case !errors.Is(err, fs.ErrExist):
		return err
	}
	write := func(rel string, f func(string) error) error {
		full := filepath.Join(name, rel)
		if _, err := r.Lstat(full); err == nil {
			return fmt.Errorf("%s: already there", filepath.Join(root, full))
		}
		if err := r.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := f(full); err != nil {
			return err
		}
		p.files = append(p.files, full)
		p.meta.Files = append(p.meta.Files, full)
		return nil
	}
	for _, path := range paths {
		if err := write(path, func(full string) error { return r.WriteFile(full, []byte(p.spec.Files[path]), 0o644) }); err != nil {
			return err
		}
	}
	if p.spec.Boot.Network {
		for _, f := range []string{p.spec.Boot.Kernel, p.spec.Boot.Initrd} {
			if f == "" {
				continue
			}
			if !filepath.IsAbs(f) {
				return fmt.Errorf("boot file %q: want an absolute path", f)
			}
			if err := write(filepath.Base(f), func(full string) error { return r.Symlink(f, full) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// undo removes what run made, the last first.
func (p *provisioning) undo(ctx context.Context) error {
	d := p.d
	var errs []error
	if p.dom != nil {
		err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
			if p.started {
				if err := l.DomainDestroyFlags(*p.dom, lv.DomainDestroyDefault); err != nil && !isCode(err, lv.ErrOperationInvalid) {
					return fmt.Errorf("destroy domain: %w", err)
				}
			}
			if err := undefine(l, *p.dom); err != nil {
				return fmt.Errorf("undefine domain: %w", err)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeFiles(p.s.tftpRoot, p.files, p.madeDir)...)
	if p.dom != nil {
		if err := removeSerialLog(p.meta.SerialLog, p.spec.Name); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, d.deleteVolumes(ctx, p.meta.Seed, p.meta.Volume)...)
	return errors.Join(errs...)
}

// deleteVolumes deletes volumes the driver made (nil ones are skipped);
// one that is gone, or whose pool is, is deleted already.
func (d *Driver) deleteVolumes(ctx context.Context, vols ...*metaVolume) []error {
	var errs []error
	for _, v := range vols {
		if v == nil {
			continue
		}
		err := d.call(ctx, callTimeout, func(l *lv.Libvirt) error {
			pool, err := l.StoragePoolLookupByName(v.Pool)
			if err != nil {
				return err
			}
			vol, err := l.StorageVolLookupByName(pool, v.Name)
			if err != nil {
				return err
			}
			return l.StorageVolDelete(vol, lv.StorageVolDeleteNormal)
		})
		if err != nil && !isCode(err, lv.ErrNoStorageVol) && !isCode(err, lv.ErrNoStoragePool) {
			errs = append(errs, fmt.Errorf("delete volume %s of pool %s: %w", v.Name, v.Pool, err))
		}
	}
	return errs
}

// undefine removes a domain's definition with what libvirt keeps beside
// it (managed save, snapshots' and checkpoints' metadata, NVRAM).
func undefine(l *lv.Libvirt, dom lv.Domain) error {
	err := l.DomainUndefineFlags(dom, lv.DomainUndefineManagedSave|lv.DomainUndefineSnapshotsMetadata|lv.DomainUndefineNvram|lv.DomainUndefineCheckpointsMetadata)
	if isCode(err, lv.ErrNoDomain) {
		return nil
	}
	return err
}

// removeFiles removes files written under root, then the directories made
// for them if empty, and dir (relative to root) if the driver made it.
func removeFiles(root string, files []string, dir string) []error {
	if root == "" || len(files) == 0 && dir == "" {
		return nil
	}
	r, err := os.OpenRoot(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return []error{err}
	}
	defer r.Close()
	var errs []error
	for _, f := range files {
		if !filepath.IsLocal(f) {
			continue
		}
		if err := r.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		// Directories the files were in, up to the machine's own.
		for parent := filepath.Dir(f); strings.Contains(parent, string(filepath.Separator)); parent = filepath.Dir(parent) {
			if r.Remove(parent) != nil {
				break
			}
		}
	}
	if dir != "" && filepath.IsLocal(dir) {
		// Files of others there are left, with the directory.
		if err := r.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove %s: %w", filepath.Join(root, dir), err))
		}
	}
	return errs
}

// removeSerialLog removes the file of a machine's serial console: only a
// file of the name the driver gives it.
func removeSerialLog(path, name string) error {
	if path == "" || filepath.Base(path) != name+"-serial.log" {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
