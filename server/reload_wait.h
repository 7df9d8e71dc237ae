/* `kiln reload --pid PID [--wait-ms N] [kiln's flags]`: send the running kiln SIGHUP and wait
 * until that reload is over (its config read and applied, and the rolling restart it began
 * done, refused or rolled back), reading /health's "reload" on the address kiln's flags (or
 * its --config file) name. systemd's ExecReload= runs it, so `systemctl reload kiln` returns
 * when the reload is over and fails when it failed, on every systemd version. */
#ifndef RELOAD_WAIT_H
#define RELOAD_WAIT_H

/* argv[0] is "reload". Returns the exit status: 0 reloaded, 1 the reload failed (why on
 * stderr; a config that does not parse fails here, kiln not signalled), 2 usage, 3 kiln did
 * not answer or the wait ran out. */
int reload_wait_main(int argc, char **argv);

#endif
