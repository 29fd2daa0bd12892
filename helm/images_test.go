package helm

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// imageBins caches the binaries built as the Dockerfiles build them, for
// the tests that run them; TestMain removes dir.
var imageBins struct {
	sync.Mutex
	dir   string
	built map[string]string
}

// imageBinary builds binary ("nodedns-frontend", "nodedns-backend") the way
// images/<component>.Dockerfile does: from a context holding only the files
// it copies, with CGO_ENABLED=0 and -trimpath. Built once per test binary.
func imageBinary(t *testing.T, binary string) string {
	t.Helper()
	imageBins.Lock()
	defer imageBins.Unlock()
	if bin, ok := imageBins.built[binary]; ok {
		return bin
	}
	if imageBins.dir == "" {
		dir, err := os.MkdirTemp("", "nodedns-helm-bins-")
		if err != nil {
			t.Fatal(err)
		}
		imageBins.dir, imageBins.built = dir, map[string]string{}
	}
	df := parseDockerfile(t, "../images/"+strings.TrimPrefix(binary, "nodedns-")+".Dockerfile")
	ctx, err := os.MkdirTemp(imageBins.dir, "context-")
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range df.copies {
		cmd := exec.Command("cp", "-r", filepath.Join("..", src), filepath.Join(ctx, strings.TrimSuffix(src, "/")))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v: %s", src, err, out)
		}
	}
	bin := filepath.Join(imageBins.dir, binary)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, df.pkg)
	build.Dir = ctx
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s from the files %s copies: %v\n%s", df.pkg, binary, err, out)
	}
	imageBins.built[binary] = bin
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if imageBins.dir != "" {
		os.RemoveAll(imageBins.dir)
	}
	os.Exit(code)
}

// dockerfile is what the image tests need from a Dockerfile.
type dockerfile struct {
	copies     []string // sources of COPY/ADD from the build context
	stageFiles []string // sources of COPY --from=<stage>
	pkg        string   // the package `go build` builds, e.g. ./frontend
	out        string   // its -o
	entrypoint string
}

func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var df dockerfile
	var logical []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		logical = append(logical, cur.String())
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, l := range logical {
		fields := strings.Fields(l)
		switch strings.ToUpper(fields[0]) {
		case "COPY", "ADD":
			args := fields[1:]
			from := false
			for len(args) > 0 && strings.HasPrefix(args[0], "--") {
				from = from || strings.HasPrefix(args[0], "--from=")
				args = args[1:]
			}
			if len(args) < 2 {
				t.Fatalf("%s: %q has no source", path, l)
			}
			if from {
				df.stageFiles = append(df.stageFiles, args[:len(args)-1]...)
			} else {
				df.copies = append(df.copies, args[:len(args)-1]...)
			}
		case "RUN":
			if i := slices.Index(fields, "build"); i > 0 && fields[i-1] == "go" {
				for j := i + 1; j < len(fields); j++ {
					switch {
					case fields[j] == "-o" && j+1 < len(fields):
						df.out = fields[j+1]
						j++
					case strings.HasPrefix(fields[j], "./"):
						df.pkg = fields[j]
					}
				}
			}
		case "ENTRYPOINT":
			df.entrypoint = strings.Trim(strings.TrimPrefix(l, fields[0]), ` []"`)
		}
	}
	return df
}

// TestImages checks the Dockerfiles without a Docker engine: their COPY
// inputs exist in the build context (the repository root), they copy every
// package of this module that the binary needs, the final stage copies the
// binary the build stage builds, the entrypoint is the command the chart
// runs, and the binary builds from exactly the copied files.
func TestImages(t *testing.T) {
	for _, c := range []struct{ file, binary string }{
		{"../images/frontend.Dockerfile", "nodedns-frontend"},
		{"../images/backend.Dockerfile", "nodedns-backend"},
	} {
		t.Run(c.binary, func(t *testing.T) {
			df := parseDockerfile(t, c.file)
			for _, src := range df.copies {
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("COPY %s: %v", src, err)
				}
			}
			if df.pkg == "" || df.out == "" {
				t.Fatalf("no `go build -o OUT ./pkg` in %s", c.file)
			}
			if !slices.Contains(df.stageFiles, df.out) {
				t.Errorf("final stage copies %v, not the built %s", df.stageFiles, df.out)
			}
			if filepath.Base(df.out) != c.binary || df.entrypoint != c.binary {
				t.Errorf("builds %s, entrypoint %q; the chart runs %s", df.out, df.entrypoint, c.binary)
			}
			copied := func(dir string) bool {
				return slices.ContainsFunc(df.copies, func(src string) bool {
					src = strings.TrimSuffix(src, "/")
					return dir == src || strings.HasPrefix(dir, src+"/")
				})
			}
			out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "../"+strings.TrimPrefix(df.pkg, "./")).Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			root, _ := filepath.Abs("..")
			for _, dir := range strings.Fields(string(out)) {
				rel, _ := filepath.Rel(root, dir)
				if !copied(filepath.ToSlash(rel)) {
					t.Errorf("%s needs %s, which the Dockerfile does not copy", df.pkg, rel)
				}
			}
			if testing.Short() {
				t.Skip("-short: not building from the copied files")
			}
			imageBinary(t, c.binary)
		})
	}
}
