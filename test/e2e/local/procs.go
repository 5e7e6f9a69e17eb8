package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startProcess starts a long-running component detached from this program, in network
// namespace netns (the host's when empty), logging to <logs>/<name>.log, and records its PID
// with the binary it runs so that "down" stops exactly it.
func (c config) startProcess(name, netns, bin string, args ...string) error {
	return c.startProcessRecorded(name, netns, bin, bin, args...)
}

// startProcessRecorded starts argv0 with args, recording bin as what the process runs.
func (c config) startProcessRecorded(name, netns, bin, argv0 string, args ...string) error {
	if err := os.MkdirAll(c.logDir(), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(c.pidDir(), 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(c.logDir(), name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	argv := append([]string{argv0}, args...)
	if netns != "" {
		// nsenter --net, not "ip netns exec": the latter remounts /sys and hides the cgroup
		// hierarchies the kubelet needs.
		argv = append([]string{"nsenter", "--net=/var/run/netns/" + netns, "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	// nsenter execs the component, which keeps the PID.
	record := fmt.Sprintf("%d\n%s\n", pid, bin)
	if err := os.WriteFile(filepath.Join(c.pidDir(), name+".pid"), []byte(record), 0o644); err != nil {
		return err
	}
	// Fail early when the component exits at once (a port in use, a bad flag).
	time.Sleep(150 * time.Millisecond)
	if !running(pid) {
		_ = cmd.Wait()
		return fmt.Errorf("%s exited at start; see %s:\n%s", name, logPath, tailFile(logPath, 15))
	}
	_ = cmd.Process.Release()
	return nil
}

// startSupervised starts a component that is started again whenever it exits, as systemd's
// Restart=always would: a shell loop runs it. Stopping it stops the loop and the component.
func (c config) startSupervised(name, netns, bin string, args ...string) error {
	quoted := make([]string, 0, len(args)+1)
	for _, a := range append([]string{bin}, args...) {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	loop := "while :; do " + strings.Join(quoted, " ") + "; echo \"$(date) " + name + " exited ($?); restarting\"; sleep 1; done"
	return c.startProcessRecorded(name, netns, bin, "/bin/sh", "-c", loop)
}

// stopRecorded stops the processes recorded in the PID directory whose names match filter,
// with SIGTERM and then SIGKILL, and only those that still run the recorded binary.
func (c config) stopRecorded(filter func(name string) bool) error {
	entries, err := os.ReadDir(c.pidDir())
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	type proc struct {
		name, bin string
		pid       int
	}
	var procs []proc
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok || !filter(name) {
			continue
		}
		path := filepath.Join(c.pidDir(), e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fields := strings.SplitN(strings.TrimSpace(string(data)), "\n", 2)
		pid, err := strconv.Atoi(fields[0])
		if err != nil || len(fields) != 2 {
			return fmt.Errorf("%s: not a PID record", path)
		}
		if alive(pid, fields[1]) {
			procs = append(procs, proc{name, fields[1], pid})
			// Each component leads its own process group (setsid): the group holds what
			// it started too, a supervised component's child or the kubelet a node agent runs.
			_ = syscall.Kill(-pid, syscall.SIGTERM)
		}
		_ = os.Remove(path)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, p := range procs {
		for alive(p.pid, p.bin) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(p.pid, p.bin) {
			logf("%s (pid %d) did not stop on SIGTERM; killing it", p.name, p.pid)
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		}
		logf("stopped %s (pid %d)", p.name, p.pid)
	}
	return nil
}

// running says whether pid exists and is not a zombie.
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && len(stat) > i+2 && stat[i+2] != 'Z'
}

// alive says whether pid is running bin (a reused PID runs something else).
func alive(pid int, bin string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && running(pid) && bytes.Contains(cmdline, []byte(bin))
}

// run runs a short command and returns its error with its output.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func tailFile(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
