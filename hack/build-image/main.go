// Command build-image assembles a container image from local files, without Docker or a base
// image, with go-containerregistry, and writes it as a tarball that `ctr images import` (and
// `docker load`) accept. The project's static binaries need nothing else; a dynamically linked
// program comes with its libraries as more --file flags (see hack/iptables-files and
// hack/conformance/program-files).
//
//	go run ./hack/build-image --ref kubenest.io/kubenest:v1 --out _output/images/kubenest.tar \
//	    --file /usr/local/bin/nest-operator=_output/bin/nest-operator
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is the timestamp of every file and of the image, so the same inputs give the same image.
var epoch = time.Unix(0, 0).UTC()

type mappings []string

func (m *mappings) String() string     { return strings.Join(*m, ",") }
func (m *mappings) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var files, links, env, dirs, modes mappings
	ref := flag.String("ref", "", "Image reference the tarball is tagged with, for example kubenest.io/kubenest:v0.1.0.")
	out := flag.String("out", "", "Tarball to write.")
	user := flag.String("user", "65532:65532", "User the image runs as; empty for the runtime's default (root).")
	entrypoint := flag.String("entrypoint", "", "Entrypoint, as a comma-separated argv; empty for none.")
	cmd := flag.String("cmd", "", "Cmd (the entrypoint's default arguments), as a comma-separated argv; empty for none.")
	workdir := flag.String("workdir", "", "Working directory of the image's processes; empty for the runtime's default (/).")
	flag.Var(&files, "file", "IMAGE_PATH=LOCAL_PATH: put a local file into the image, executable (see --mode). Repeatable.")
	flag.Var(&modes, "mode", "IMAGE_PATH=OCTAL: the mode of a --file other than 0755, for example 0644 or 04755 (setuid). Repeatable.")
	flag.Var(&dirs, "dir", "IMAGE_PATH: an empty directory (mode 0755) in the image. Repeatable.")
	flag.Var(&links, "link", "IMAGE_PATH=TARGET: a symbolic link in the image. Repeatable.")
	flag.Var(&env, "env", "NAME=VALUE: an environment variable of the image. Repeatable.")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "build-image writes a container image made of local files as a tarball.\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	spec := imageSpec{user: *user, entrypoint: *entrypoint, cmd: *cmd, workdir: *workdir, env: env}
	if err := run(*ref, *out, spec, files, links, dirs, modes); err != nil {
		fmt.Fprintf(os.Stderr, "build-image: %v\n", err)
		os.Exit(1)
	}
}

// imageSpec is the image's configuration: how its processes run.
type imageSpec struct {
	user, entrypoint, cmd, workdir string
	env                            []string
}

func run(ref, out string, spec imageSpec, files, links, dirs, modes []string) error {
	if ref == "" || out == "" || len(files) == 0 {
		return fmt.Errorf("--ref, --out and at least one --file are required; see --help")
	}
	tag, err := name.NewTag(ref, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("--ref %q: %w", ref, err)
	}
	fileModes, err := parseModes(modes, files)
	if err != nil {
		return err
	}
	layer, err := buildLayer(files, links, dirs, fileModes)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.User = spec.user
	cfg.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, spec.env...)
	if spec.entrypoint != "" {
		cfg.Config.Entrypoint = strings.Split(spec.entrypoint, ",")
	}
	if spec.cmd != "" {
		cfg.Config.Cmd = strings.Split(spec.cmd, ",")
	}
	cfg.Config.WorkingDir = spec.workdir
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s -> %s\n", tag, digest, out)
	return nil
}

// parseModes reads the --mode flags: each names a --file.
func parseModes(modes, files []string) (map[string]int64, error) {
	m := map[string]int64{}
	for _, v := range modes {
		dst, octal, ok := strings.Cut(v, "=")
		mode, err := strconv.ParseInt(octal, 8, 64)
		if !ok || err != nil || mode < 0 || mode > 0o7777 {
			return nil, fmt.Errorf("--mode %q: want /image/path=OCTAL, for example /etc/passwd=0644", v)
		}
		if !slices.ContainsFunc(files, func(f string) bool { return strings.HasPrefix(f, dst+"=") }) {
			return nil, fmt.Errorf("--mode %q: no --file %s", v, dst)
		}
		m[dst] = mode
	}
	return m, nil
}

// buildLayer makes one gzipped layer with the files (mode 0755 unless modes says otherwise),
// links, directories, and their parent directories.
func buildLayer(files, links, emptyDirs []string, modes map[string]int64) (v1.Layer, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	dirs := map[string]bool{}
	mkdirs := func(p string) error {
		var parents []string
		for d := path.Dir(p); d != "/" && d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
			dirs[d] = true
		}
		slices.Reverse(parents)
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return err
			}
		}
		return nil
	}
	// /tmp exists and is writable in every image, as programs expect.
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}); err != nil {
		return nil, err
	}
	for _, m := range files {
		dst, src, ok := strings.Cut(m, "=")
		if !ok || !path.IsAbs(dst) {
			return nil, fmt.Errorf("--file %q: want /image/path=local/path", m)
		}
		if err := mkdirs(dst); err != nil {
			return nil, err
		}
		mode, ok := modes[dst]
		if !ok {
			mode = 0o755
		}
		if err := addFile(tw, dst, src, mode); err != nil {
			return nil, err
		}
	}
	for _, m := range links {
		dst, target, ok := strings.Cut(m, "=")
		if !ok || !path.IsAbs(dst) {
			return nil, fmt.Errorf("--link %q: want /image/path=target", m)
		}
		if err := mkdirs(dst); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(dst, "/"), Linkname: target, Mode: 0o777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, d := range emptyDirs {
		if !path.IsAbs(d) {
			return nil, fmt.Errorf("--dir %q: want an absolute path", d)
		}
		d = path.Clean(d)
		if dirs[d] {
			continue
		}
		if err := mkdirs(d + "/"); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

func addFile(tw *tar.Writer, dst, src string, mode int64) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("--file %s: %w", dst, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Size: st.Size(), Mode: mode, ModTime: epoch}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
