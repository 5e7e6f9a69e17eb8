package install

import (
	"context"
	"fmt"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// DBus talks to the host's systemd over its private socket (/run/systemd/private, which the
// installer's pod mounts from the host).
type DBus struct{ conn *sddbus.Conn }

// ConnectDBus connects to systemd.
func ConnectDBus(ctx context.Context) (*DBus, error) {
	conn, err := sddbus.NewSystemdConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd (is the host's /run/systemd mounted?): %w", err)
	}
	return &DBus{conn: conn}, nil
}

// Close closes the connection.
func (d *DBus) Close() { d.conn.Close() }

func (d *DBus) Reload(ctx context.Context) error { return d.conn.ReloadContext(ctx) }

func (d *DBus) Enable(ctx context.Context, unit string) error {
	_, _, err := d.conn.EnableUnitFilesContext(ctx, []string{unit}, false, true)
	return err
}

func (d *DBus) Restart(ctx context.Context, unit string) error {
	return d.job(ctx, unit, d.conn.RestartUnitContext)
}

func (d *DBus) Start(ctx context.Context, unit string) error {
	return d.job(ctx, unit, d.conn.StartUnitContext)
}

// job runs a unit job and waits for its result.
func (d *DBus) job(ctx context.Context, unit string, do func(context.Context, string, string, chan<- string) (int, error)) error {
	done := make(chan string, 1)
	if _, err := do(ctx, unit, "replace", done); err != nil {
		return err
	}
	select {
	case result := <-done:
		if result != "done" {
			return fmt.Errorf("systemd job for %s: %s (see journalctl -u %s)", unit, result, unit)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
