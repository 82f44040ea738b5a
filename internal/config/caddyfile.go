package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"

	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/fleet"
)

// UnmarshalCaddyfile sets the settings from Caddyfile tokens. Syntax:
//
//	mcp_sandbox {
//		api_key          <key>              # required, e.g. {env.SANDBOX_API_KEY}
//		public_url       <https://host>     # default: scheme and host of the request
//		image            <image>            # default: code-sandbox:latest
//		container        <name>             # default: mcp-sandbox-persistent
//		volume           <name>             # default: mcp-sandbox-data
//		memory           <size>             # default: 3g
//		cpus             <number>           # default: 3
//		pids_limit       <number>           # default: 4096
//		network          <docker network>   # default: mcp-sandbox (own bridge, created if missing); none cuts the sandbox off
//		runtime          <name>             # default: the engine's (runc); e.g. runsc for gVisor (docs/security.md)
//		keep_processes   on|off             # default: off; a stop saves running processes with their memory (runsc only)
//		agent            on|off             # default: on; off runs each command as a Docker exec of its own
//		exec_timeout     <duration>         # default: 1h
//		max_output       <bytes>            # default: 200000
//		default_output   <bytes>            # default: 30000; what a call returns unless it asks for more (at most max_output)
//		file_ttl         <duration>         # default: 7d; 0 disables the idle-file cleanup
//		cleanup_interval <duration>         # default: 1h
//		link_ttl         <duration>         # default: 24h
//		yield_after      <duration>|off     # default: 45s; execute returns a running job after this
//		max_jobs         <number>           # default: 32 commands running at once
//		max_task_ttl     <duration>         # default: 1h; longest an MCP task's result is kept
//		max_tasks        <n> [<in all>]     # default: 100 MCP tasks per session, 1000 in all
//		max_upload       <size>             # default: 2GiB; per uploaded file, e.g. 500MB, 2GB
//		max_link_ttl     <duration>         # default: 7d; longest expires_in of share_file
//		api_key_bearer   on|off             # default: on
//		keepalive        <duration>         # default: 5s
//		allowed_origins  <origin...>
//		allow_private_client_metadata       # development only
//		storage          <module> { ... }   # default: Caddy's storage; where OAuth state lives
//		previews         <domain>           # e.g. preview.example.com or localhost; absent: off
//		preview_auth     on|off             # default: off (preview URLs are capability URLs)
//		preview_ttl      <duration>         # default: 24h
//		person <name> <key> [{              # one sandbox per person, signed in with their key; repeatable
//			memory <size>                   # the site's memory unless given
//			cpus   <number>                 # the site's cpus unless given
//			pids   <number>                 # the site's pids_limit unless given
//			runtime <name>                  # the site's runtime unless given
//			keep_processes on|off           # the site's keep_processes unless given
//			egress { ... }                  # as below: this person's rules and credentials on top of the site's egress
//		}]
//		max_sandboxes    <number>           # default: unlimited; people's sandboxes that may exist
//		warm_sandboxes   <number>           # default: 0; sandboxes made ahead of need for new people
//		idle_stop        <duration>         # default: 0 (never); stop a sandbox unused this long, files kept
//		max_checkpoints  <number>           # default: 5 per sandbox; a new one past it removes the oldest
//		max_checkpoint_bytes <size>         # default: 10GiB per sandbox, all its checkpoints together
//		checkpoint_volume_options <key=value...>  # local driver options of checkpoints' copies of /sandbox
//		engine <name> <address> {           # repeated: the engines sandboxes are placed on; default: docker_host
//			tls_ca   <file>                 # Docker's --tlscacert, --tlscert, --tlskey
//			tls_cert <file>
//			tls_key  <file>
//		}
//		engine <name> kubernetes [{         # instead of Docker engines: every sandbox a pod on the cluster
//			kubeconfig        <file>        # default: the in-cluster configuration (Caddy in a pod)
//			context           <name>        # default: the kubeconfig's current context
//			namespace         <name>        # default: default
//			storage_class     <name>        # default: the cluster's default storage class
//			volume_size       <size>        # default: 10GiB; each claim's request, e.g. 20Gi
//			ephemeral_storage <size>        # default: none; each pod's ephemeral-storage request and limit (writes outside /sandbox), e.g. 2Gi
//			image_pull_policy Always|IfNotPresent|Never   # default: IfNotPresent
//		}]
//		egress {                            # absent: network as configured; present: no network but these hosts, through Caddy
//			allow      <host[:port]...>     # example.com, *.example.com, example.com:8443, * (public hosts); ports 80 and 443 by default
//			deny       <host[:port]...>     # wins over allow
//			credential <url prefix> header <name> <value>   # one per request: the longest prefix that matches
//			credential <url prefix> basic <user> <password>
//			host       <name> <address>     # instead of DNS; the only way to a private address, opened by allowing the name
//			trust_ca   <pem file...>        # extra roots for upstream TLS of intercepted hosts
//		}
//	}
//
// Durations take Caddy's forms (90s, 1h, 7d). The API key both signs people in and
// signs download links: changing it signs everyone out and invalidates every link.
func (s *Settings) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		name := d.Val()
		if seen[name] && name != "allowed_origins" && name != "person" && name != "engine" {
			return d.Errf("duplicate subdirective %s", name)
		}
		seen[name] = true
		var err error
		switch name {
		case "api_key":
			err = OneValue(d, &s.APIKey)
		case "public_url":
			err = OneValue(d, &s.PublicURL)
		case "image":
			err = OneValue(d, &s.Image)
		case "container":
			err = OneValue(d, &s.Container)
		case "volume":
			err = OneValue(d, &s.Volume)
		case "memory":
			err = OneValue(d, &s.Memory)
		case "network":
			err = OneValue(d, &s.Network)
		case "runtime":
			err = OneValue(d, &s.Runtime)
		case "keep_processes":
			err = oneSwitch(d, &s.KeepProcesses)
		case "cpus":
			err = positiveFloat(d, &s.CPUs)
		case "person":
			var p Person
			if p, err = parsePerson(d); err == nil {
				s.People = append(s.People, p)
			}
		case "max_sandboxes":
			if err = oneInt(d, &s.MaxSandboxes); err == nil && s.MaxSandboxes == 0 {
				return d.Errf("max_sandboxes: must be at least 1")
			}
		case "warm_sandboxes":
			err = oneInt(d, &s.WarmSandboxes)
		case "pids_limit":
			var n int
			if err = oneInt(d, &n); err == nil {
				s.PidsLimit = int64(n)
			}
		case "max_output":
			err = oneInt(d, &s.MaxOutput)
		case "default_output":
			err = oneInt(d, &s.DefaultOutput)
		case "exec_timeout":
			err = oneDuration(d, &s.ExecTimeout)
		case "file_ttl":
			var v caddy.Duration
			if err = oneDuration(d, &v); err == nil {
				s.FileTTL = &v
			}
		case "cleanup_interval":
			err = oneDuration(d, &s.CleanupInterval)
		case "link_ttl":
			err = oneDuration(d, &s.LinkTTL)
		case "max_upload":
			var v string
			if err = OneValue(d, &v); err == nil {
				n, perr := humanize.ParseBytes(v)
				if perr != nil || n == 0 || n > math.MaxInt64 {
					return d.Errf("max_upload: %q is not a size like 500MB, 2GB or 2GiB", v)
				}
				s.MaxUpload = int64(n)
			}
		case "max_link_ttl":
			err = oneDuration(d, &s.MaxLinkTTL)
		case "keepalive":
			err = oneDuration(d, &s.Keepalive)
		case "yield_after":
			var arg string
			if err = OneValue(d, &arg); err == nil {
				var v caddy.Duration
				if arg != "off" {
					dur, perr := caddy.ParseDuration(arg)
					if perr != nil || dur <= 0 {
						return d.Errf("yield_after: %q is not a positive duration like 45s, or off", arg)
					}
					v = caddy.Duration(dur)
				}
				s.YieldAfter = &v
			}
		case "max_jobs":
			if err = oneInt(d, &s.MaxJobs); err == nil && s.MaxJobs == 0 {
				return d.Errf("max_jobs: must be at least 1")
			}
		case "max_task_ttl":
			if err = oneDuration(d, &s.MaxTaskTTL); err == nil && s.MaxTaskTTL < caddy.Duration(time.Second) {
				return d.Errf("max_task_ttl: must be at least 1s")
			}
		case "max_tasks":
			args := d.RemainingArgs()
			if len(args) == 0 || len(args) > 2 {
				return d.Errf("max_tasks takes one or two numbers: per session, then in all")
			}
			n := make([]int, len(args))
			for i, a := range args {
				if n[i], err = strconv.Atoi(a); err != nil || n[i] < 1 {
					return d.Errf("max_tasks: %q is not a whole number of at least 1", a)
				}
			}
			s.MaxTasks = n[0]
			if len(n) == 2 {
				s.MaxTasksTotal = n[1]
			}
		case "agent":
			var on bool
			if err = oneSwitch(d, &on); err == nil {
				s.Agent = offOnly(on)
			}
		case "api_key_bearer":
			var on bool
			if err = oneSwitch(d, &on); err == nil {
				s.APIKeyBearer = offOnly(on)
			}
		case "allowed_origins":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			s.AllowedOrigins = append(s.AllowedOrigins, args...)
		case "engine":
			var e fleet.Engine
			if e, err = parseEngine(d); err == nil {
				s.Engines = append(s.Engines, e)
			}
		case "idle_stop":
			err = oneDuration(d, &s.IdleStop)
		case "max_checkpoints":
			if err = oneInt(d, &s.MaxCheckpoints); err == nil && s.MaxCheckpoints == 0 {
				return d.Errf("max_checkpoints: must be at least 1")
			}
		case "max_checkpoint_bytes":
			var v string
			if err = OneValue(d, &v); err == nil {
				if s.MaxCheckpointBytes, err = parseSize(v); err != nil {
					return d.Errf("max_checkpoint_bytes: %q is not a size like 10GiB or 500MB", v)
				}
			}
		case "checkpoint_volume_options":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Errf("checkpoint_volume_options takes key=value options of Docker's local volume driver, e.g. type=tmpfs device=tmpfs o=size=2g")
			}
			s.CheckpointVolumeOptions = append(s.CheckpointVolumeOptions, args...)
		case "previews":
			err = OneValue(d, &s.Previews)
		case "preview_ttl":
			err = oneDuration(d, &s.PreviewTTL)
		case "preview_auth":
			err = oneSwitch(d, &s.PreviewAuth)
		case "allow_private_client_metadata":
			if d.NextArg() {
				return d.ArgErr()
			}
			s.AllowPrivateClientMetadata = true
		case "egress":
			s.Egress, err = parseEgress(d)
		case "storage":
			if !d.NextArg() {
				return d.ArgErr()
			}
			stem := d.Val()
			unm, uerr := caddyfile.UnmarshalModule(d, "caddy.storage."+stem)
			if uerr != nil {
				return uerr
			}
			st, ok := unm.(caddy.StorageConverter)
			if !ok {
				return d.Errf("storage: module %s is not a Caddy storage", stem)
			}
			s.StorageRaw = caddyconfig.JSONModuleObject(st, "module", stem, nil)
		default:
			return d.Errf("unrecognized subdirective %s", name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parseEngine reads `engine <name> <address> [{ tls_ca <file> tls_cert <file> tls_key <file> }]`,
// or `engine <name> kubernetes [{ ... }]` (parseKubeEngine).
func parseEngine(d *caddyfile.Dispenser) (fleet.Engine, error) {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return fleet.Engine{}, d.Errf("engine takes a name and an address, e.g. engine big tcp://10.0.0.7:2376, or a name and kubernetes: engine cluster kubernetes { kubeconfig /etc/kube/config }")
	}
	if args[1] == fleet.KindKubernetes {
		return parseKubeEngine(d, args[0])
	}
	e := fleet.Engine{Name: args[0], Host: args[1]}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch d.Val() {
		case "tls_ca":
			err = OneValue(d, &e.TLSCA)
		case "tls_cert":
			err = OneValue(d, &e.TLSCert)
		case "tls_key":
			err = OneValue(d, &e.TLSKey)
		default:
			return fleet.Engine{}, d.Errf("engine %s: unrecognized setting %s (tls_ca, tls_cert, tls_key)", e.Name, d.Val())
		}
		if err != nil {
			return fleet.Engine{}, err
		}
	}
	return e, nil
}

// parseKubeEngine reads the block of `engine <name> kubernetes`.
func parseKubeEngine(d *caddyfile.Dispenser, name string) (fleet.Engine, error) {
	e := fleet.Engine{Name: name, Kind: fleet.KindKubernetes}
	k := &e.Kubernetes
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return fleet.Engine{}, d.Errf("engine %s: duplicate setting %s", name, sub)
		}
		seen[sub] = true
		var err error
		switch sub {
		case "kubeconfig":
			err = OneValue(d, &k.Kubeconfig)
		case "context":
			err = OneValue(d, &k.Context)
		case "namespace":
			err = OneValue(d, &k.Namespace)
		case "storage_class":
			err = OneValue(d, &k.StorageClass)
		case "image_pull_policy":
			err = OneValue(d, &k.ImagePullPolicy)
		case "volume_size":
			err = engineSize(d, name, sub, "10Gi, 20GiB or 500MB", &k.VolumeSize)
		case "ephemeral_storage":
			err = engineSize(d, name, sub, "2Gi, 4GiB or 500MB", &k.EphemeralStorage)
		case "tls_ca", "tls_cert", "tls_key":
			return fleet.Engine{}, d.Errf("engine %s: %s is for Docker engines; a kubernetes engine reaches its API server as its kubeconfig says", name, sub)
		default:
			return fleet.Engine{}, d.Errf("engine %s: unrecognized setting %s (kubeconfig, context, namespace, storage_class, volume_size, ephemeral_storage, image_pull_policy)", name, sub)
		}
		if err != nil {
			return fleet.Engine{}, err
		}
	}
	return e, nil
}

// parseSize reads a size in bytes: humanize's forms (500MB, 2GiB) and Kubernetes'
// binary suffixes (10Gi, 512Mi).
// engineSize reads the one size of engine setting sub into dst; examples are sizes
// the error shows.
func engineSize(d *caddyfile.Dispenser, engine, sub, examples string, dst *int64) error {
	var v string
	if err := OneValue(d, &v); err != nil {
		return err
	}
	n, err := parseSize(v)
	if err != nil {
		return d.Errf("engine %s: %s: %q is not a size like %s", engine, sub, v, examples)
	}
	*dst = n
	return nil
}

func parseSize(v string) (int64, error) {
	if strings.HasSuffix(v, "i") {
		v += "B"
	}
	n, err := humanize.ParseBytes(v)
	if err != nil || n == 0 || n > math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a size", v)
	}
	return int64(n), nil
}

// parsePerson reads `person <name> <key> [{ memory <size> cpus <n> pids <n> runtime <name> keep_processes on|off egress {...} }]`.
func parsePerson(d *caddyfile.Dispenser) (Person, error) {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return Person{}, d.Errf("person takes a name and a key, e.g. person alice {env.ALICE_KEY}")
	}
	p := Person{Name: args[0], Key: args[1]}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch sub := d.Val(); sub {
		case "memory":
			err = OneValue(d, &p.Memory)
		case "cpus":
			err = positiveFloat(d, &p.CPUs)
		case "pids":
			var n int
			if err = oneInt(d, &n); err == nil {
				p.PidsLimit = int64(n)
			}
		case "runtime":
			err = OneValue(d, &p.Runtime)
		case "keep_processes":
			var on bool
			if err = oneSwitch(d, &on); err == nil {
				p.KeepProcesses = &on
			}
		case "egress":
			p.Egress, err = parseEgress(d)
		default:
			return p, d.Errf("person %s: unrecognized subdirective %s (memory, cpus, pids, runtime, keep_processes, egress)", p.Name, sub)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

// parseEgress reads the egress block; the rules themselves are checked by Validate.
func parseEgress(d *caddyfile.Dispenser) (*EgressConfig, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	e := &EgressConfig{}
	for nest := d.Nesting(); d.NextBlock(nest); {
		switch sub := d.Val(); sub {
		case "allow", "deny":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.Errf("egress %s needs at least one host", sub)
			}
			if sub == "allow" {
				e.Allow = append(e.Allow, args...)
			} else {
				e.Deny = append(e.Deny, args...)
			}
		case "host":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return nil, d.Errf("egress host takes a name and an address: host git.internal.example 10.0.0.5")
			}
			if e.Hosts == nil {
				e.Hosts = map[string]string{}
			}
			if _, dup := e.Hosts[args[0]]; dup {
				return nil, d.Errf("egress host %s is mapped twice", args[0])
			}
			e.Hosts[args[0]] = args[1]
		case "ask":
			if e.Ask != nil {
				return nil, d.Errf("egress ask is given twice")
			}
			on := true
			switch args := d.RemainingArgs(); {
			case len(args) == 1 && (args[0] == "on" || args[0] == "off"):
				on = args[0] == "on"
			case len(args) != 0:
				return nil, d.Errf("egress ask takes nothing, on or off")
			}
			e.Ask = &on
		case "trust_ca":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.Errf("egress trust_ca needs a PEM file")
			}
			e.TrustCA = append(e.TrustCA, args...)
		case "credential":
			args := d.RemainingArgs()
			if len(args) != 4 || (args[1] != "header" && args[1] != "basic") {
				return nil, d.Errf("egress credential takes <url prefix> header <name> <value>, or <url prefix> basic <user> <password>")
			}
			c := EgressCredential{Prefix: args[0]}
			if args[1] == "header" {
				c.Header, c.Value = args[2], args[3]
			} else {
				c.User, c.Password = args[2], args[3]
			}
			e.Credentials = append(e.Credentials, c)
		default:
			return nil, d.Errf("unrecognized egress subdirective %s", sub)
		}
	}
	return e, nil
}

// OneValue reads the one value of the subdirective d is on.
func OneValue(d *caddyfile.Dispenser, dst *string) error {
	name := d.Val()
	if !d.NextArg() {
		return d.Errf("%s needs a value", name)
	}
	*dst = d.Val()
	if d.NextArg() {
		return d.Errf("%s takes one value, got more: %s", name, d.Val())
	}
	return nil
}

// oneSwitch reads on or off.
func oneSwitch(d *caddyfile.Dispenser, on *bool) error {
	name := d.Val()
	var s string
	if err := OneValue(d, &s); err != nil {
		return err
	}
	switch s {
	case "on":
		*on = true
	case "off":
		*on = false
	default:
		return d.Errf("%s: want on or off, got %q", name, s)
	}
	return nil
}

// offOnly is a default-on setting as stored: nil for on, false for off.
func offOnly(on bool) *bool {
	if on {
		return nil
	}
	return &on
}

// positiveFloat reads a number above 0.
func positiveFloat(d *caddyfile.Dispenser, dst *float64) error {
	name := d.Val()
	var s string
	if err := OneValue(d, &s); err != nil {
		return err
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return d.Errf("%s: %q is not a positive number", name, s)
	}
	*dst = v
	return nil
}

func oneInt(d *caddyfile.Dispenser, dst *int) error {
	name := d.Val()
	var s string
	if err := OneValue(d, &s); err != nil {
		return err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return d.Errf("%s: %q is not a non-negative whole number", name, s)
	}
	*dst = n
	return nil
}

func oneDuration(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	name := d.Val()
	var s string
	if err := OneValue(d, &s); err != nil {
		return err
	}
	v, err := caddy.ParseDuration(s)
	if err != nil || v < 0 {
		return d.Errf("%s: %q is not a duration like 90s, 1h or 7d", name, s)
	}
	*dst = caddy.Duration(v)
	return nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Settings)(nil)
