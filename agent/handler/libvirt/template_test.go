package libvirt

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

func sampleData() TemplateData {
	return TemplateData{
		Name: "web-1", Host: "web", MemoryMiB: 256, CPUs: 2, DomainType: "qemu",
		Kernel: "/boot/vmlinuz", Initrd: "/boot/initrd.img", Cmdline: "console=ttyS0 quiet",
		DiskPath: "/var/lib/libvirt/images/web-1.qcow2", DiskFormat: "qcow2",
		Network: "user", SerialLog: "/var/log/libvirt/qemu/web-1-serial.log",
	}
}

func TestDefaultTemplateRendersADomain(t *testing.T) {
	doc, err := Render(DefaultTemplate(), sampleData())
	if err != nil {
		t.Fatal(err)
	}
	dom, err := checkDomain(doc, "web-1")
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if dom.Type != "qemu" {
		t.Errorf("type %q, want qemu", dom.Type)
	}
	if dom.Memory == nil || dom.Memory.Value != 256 || dom.Memory.Unit != "MiB" {
		t.Errorf("memory %+v, want 256 MiB", dom.Memory)
	}
	if dom.VCPU == nil || dom.VCPU.Value != 2 {
		t.Errorf("vcpu %+v, want 2", dom.VCPU)
	}
	if dom.Features == nil || dom.Features.ACPI == nil {
		t.Errorf("no <acpi/> in %s", doc)
	}
	if dom.OS == nil || dom.OS.Kernel != "/boot/vmlinuz" || dom.OS.Initrd != "/boot/initrd.img" || dom.OS.Cmdline != "console=ttyS0 quiet" {
		t.Errorf("os %+v, want a direct kernel boot", dom.OS)
	}
	devs := dom.Devices
	if len(devs.Disks) != 1 || devs.Disks[0].Source.File.File != "/var/lib/libvirt/images/web-1.qcow2" || devs.Disks[0].Driver.Type != "qcow2" {
		t.Errorf("disks %+v", devs.Disks)
	}
	if len(devs.Interfaces) != 1 || devs.Interfaces[0].Source.User == nil {
		t.Errorf("interfaces %+v, want one of type user", devs.Interfaces)
	}
	if len(devs.Serials) != 1 || devs.Serials[0].Source.File.Path != "/var/log/libvirt/qemu/web-1-serial.log" {
		t.Errorf("serials %+v, want one to the serial log", devs.Serials)
	}
	meta, err := readMeta(dom.Metadata.XML)
	if err != nil || meta == nil || meta.Host != "web" {
		t.Errorf("metadata %q: host %+v, %v; want web", dom.Metadata.XML, meta, err)
	}
	if dom.QEMUCommandline != nil {
		t.Errorf("qemu:commandline %+v without a network boot", dom.QEMUCommandline)
	}
}

func TestDefaultTemplateNetworkBoot(t *testing.T) {
	data := sampleData()
	data.Kernel, data.Initrd, data.Cmdline = "", "", ""
	data.NetworkBoot, data.TFTPRoot = true, "/srv/tftp/web-1"
	doc, err := Render(DefaultTemplate(), data)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := checkDomain(doc, "web-1")
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if len(dom.OS.BootDevices) != 1 || dom.OS.BootDevices[0].Dev != "network" {
		t.Errorf("boot devices %+v, want network", dom.OS.BootDevices)
	}
	if dom.OS.Kernel != "" {
		t.Errorf("kernel %q on a network boot", dom.OS.Kernel)
	}
	// The PXE NIC is QEMU's own user network: no second one from libvirt.
	if len(dom.Devices.Interfaces) != 0 {
		t.Errorf("interfaces %+v, want none besides the PXE one", dom.Devices.Interfaces)
	}
	var args []string
	if dom.QEMUCommandline != nil {
		for _, a := range dom.QEMUCommandline.Args {
			args = append(args, a.Value)
		}
	}
	want := []string{"-netdev", "user,id=pxe0,tftp=/srv/tftp/web-1,bootfile=boot.ipxe", "-device", "virtio-net-pci,netdev=pxe0,bootindex=1,addr=0x9"}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("qemu args %q, want %q", args, want)
	}
}

// renderDefault renders the driver's template with data, a domain.
func renderDefault(t *testing.T, data TemplateData) *libvirtxml.Domain {
	t.Helper()
	doc, err := Render(DefaultTemplate(), data)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := checkDomain(doc, data.Name)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return dom
}

func TestDefaultTemplateAttachesTheSeed(t *testing.T) {
	data := sampleData()
	data.SeedPath = "/var/lib/libvirt/images/web-1.seed.iso"
	dom := renderDefault(t, data)
	disks := dom.Devices.Disks
	if len(disks) != 2 {
		t.Fatalf("disks %+v, want the machine's and its seed", disks)
	}
	cd := disks[1]
	if cd.Device != "cdrom" || cd.ReadOnly == nil || cd.Source == nil || cd.Source.File == nil || cd.Source.File.File != data.SeedPath ||
		cd.Driver == nil || cd.Driver.Type != "raw" || cd.Target == nil || cd.Target.Bus != "sata" {
		t.Errorf("seed %+v (source %+v, target %+v), want a read-only raw cdrom of %s on the SATA bus", cd, cd.Source, cd.Target, data.SeedPath)
	}
	if !slices.Contains(TemplateFields(), "SeedPath") {
		t.Errorf("TemplateFields() = %v: no SeedPath", TemplateFields())
	}
}

func TestDefaultTemplateLibvirtNetwork(t *testing.T) {
	data := sampleData()
	data.Network = "lab"
	dom := renderDefault(t, data)
	if ifs := dom.Devices.Interfaces; len(ifs) != 1 || ifs[0].Source.Network == nil || ifs[0].Source.Network.Network != "lab" {
		t.Errorf("interfaces %+v, want one on network lab", ifs)
	}
}

func TestRenderEscapesValues(t *testing.T) {
	data := sampleData()
	data.Cmdline = `console=ttyS0 x="<a & 'b'>"`
	doc, err := Render(DefaultTemplate(), data)
	if err != nil {
		t.Fatal(err)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(doc); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if dom.OS.Cmdline != data.Cmdline {
		t.Errorf("cmdline %q, want %q", dom.OS.Cmdline, data.Cmdline)
	}
}

func TestRenderRefusesUnknownFields(t *testing.T) {
	tests := []struct {
		name, tmpl, want string
	}{
		{"top level", `<domain>{{.Bogus}}</domain>`, ".Bogus"},
		{"a branch not taken", `{{if .NetworkBoot}}{{.TFTPDir}}{{end}}`, ".TFTPDir"},
		{"a pipeline", `{{printf "%s" .Nmae}}`, ".Nmae"},
		{"dollar within with", `{{with .Kernel}}{{$.Kernal}}{{end}}`, ".Kernal"},
		{"else of with", `{{with .Kernel}}{{.}}{{else}}{{.Initrdd}}{{end}}`, ".Initrdd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Render(tt.tmpl, sampleData())
			if err == nil || !strings.Contains(err.Error(), "unknown field "+tt.want) {
				t.Fatalf("got %v, want an error naming %s", err, tt.want)
			}
		})
	}
	// Within with, dot is the value: its fields are not the data's.
	if _, err := Render(`{{with .Name}}{{len .}}{{end}}{{range .CPUs}}{{.}}{{end}}`, sampleData()); err != nil {
		t.Errorf("got %v, want no error", err)
	}
	if _, err := Render(`{{.Name`, sampleData()); err == nil || !strings.Contains(err.Error(), "domain template") {
		t.Errorf("got %v, want a parse error", err)
	}
}

func TestTemplateFieldsNameTheData(t *testing.T) {
	got := TemplateFields()
	for _, want := range []string{"Name", "Host", "MemoryMiB", "CPUs", "DomainType", "Kernel", "Initrd", "Cmdline", "DiskPath", "DiskFormat", "Network", "NetworkBoot", "TFTPRoot", "SerialLog"} {
		if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+want+" ") {
			t.Errorf("TemplateFields() = %v: no %s", got, want)
		}
	}
	// Every field the default template uses is listed, so a server that
	// checks templates against the list accepts the default.
	if _, err := Render(DefaultTemplate(), TemplateData{}); err != nil && strings.Contains(err.Error(), "unknown field") {
		t.Error(err)
	}
}

func TestCheckDomain(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{`<domain type='qemu'><name>other</name></domain>`, `named "other"`},
		{`<domain><name>web-1</name></domain>`, "no type"},
		{`<machine/>`, "not a libvirt domain"},
		{`<domain type='qemu'><name>web-1</name>`, "not a libvirt domain"},
	} {
		if _, err := checkDomain(tt.doc, "web-1"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error saying %q", tt.doc, err, tt.want)
		}
	}
}

func TestReadSettings(t *testing.T) {
	s, err := readSettings(map[string]any{
		"memory_mib": float64(512), "cpus": int64(2), "disk_gib": json.Number("4"),
		"pool": "lab", "network": "br0", "domain_type": "kvm", "tftp_root": "/srv/tftp", "flavour": "ignored",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := settings{network: "br0", pool: "lab", domainType: "kvm", memoryMiB: 512, cpus: 2, diskGiB: 4, tftpRoot: "/srv/tftp", logDir: DefaultLogDir}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	def, err := readSettings(nil)
	if err != nil {
		t.Fatal(err)
	}
	if def.network != "user" || def.pool != "default" || def.domainType != "qemu" || def.memoryMiB != 1024 || def.cpus != 1 || def.diskGiB != 8 {
		t.Errorf("defaults %+v", def)
	}
	for _, tt := range []struct {
		settings map[string]any
		want     string
	}{
		{map[string]any{"memory_mib": 1.5}, "memory_mib: 1.5: want a whole number"},
		{map[string]any{"cpus": "2"}, "cpus: 2 (string): want a whole number"},
		{map[string]any{"cpus": int64(0)}, "cpus: 0: want 1 to 256"},
		{map[string]any{"disk_gib": float64(1 << 20)}, "disk_gib: 1048576: want 1 to 65536"},
		{map[string]any{"pool": 3.0}, "pool: 3 (float64): want a string"},
		{map[string]any{"domain_type": "xen"}, `domain_type: "xen": want qemu or kvm`},
		{map[string]any{"tftp_root": "srv/tftp"}, "tftp_root: \"srv/tftp\": want an absolute path"},
		{map[string]any{"tftp_root": "/srv/a,b"}, "comma"},
	} {
		if _, err := readSettings(tt.settings); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want an error saying %q", tt.settings, err, tt.want)
		}
	}
}

func TestParseURI(t *testing.T) {
	for _, tt := range []struct{ uri, remote string }{
		{"qemu:///system", "qemu:///system"},
		{"qemu+unix:///system?socket=/run/x.sock", "qemu:///system"},
		{"qemu+tcp://hv1:16509/system", "qemu:///system"},
		{"qemu+tcp://hv1/system", "qemu:///system"},
	} {
		remote, _, err := parseURI(tt.uri)
		if err != nil || string(remote) != tt.remote {
			t.Errorf("%s: got %q, %v; want %q", tt.uri, remote, err, tt.remote)
		}
	}
	for _, tt := range []struct{ uri, want string }{
		{"xen:///system", `driver "xen"`},
		{"qemu+ssh://hv1/system", `transport "ssh"`},
		{"qemu://hv1/system", "TLS"},
		{"qemu+tcp:///system", "no host"},
	} {
		if _, _, err := parseURI(tt.uri); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error saying %q", tt.uri, err, tt.want)
		}
	}
}
