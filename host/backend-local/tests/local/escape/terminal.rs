//! Finding 9: a task pushed a command into the controlling terminal's input
//! queue (`TIOCSTI` on `/dev/tty`), which the user's root shell ran once
//! sandfleet exited. Sandbox processes now have no controlling terminal
//! and no `/dev/tty`, and `TIOCSTI` is refused even on a terminal of the
//! sandbox's own. (`tests/e2e/terminal.rs` drives the whole binary from a
//! pseudo-terminal, as a person would.)

use super::setups;
use sandfleet_core::Backend;

/// Makes a private pseudo-terminal its own controlling terminal (a new
/// session, then the first terminal it opens) and pushes a byte into it
/// through the C library's `ioctl`, with the request as the kernel reads it
/// and with bits set above the 32 it reads; prints what each came to.
const INJECT: &str = r#"
import ctypes, errno, os, pty, termios
libc = ctypes.CDLL(None, use_errno=True)
master, slave = pty.openpty()
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(os.ttyname(slave), os.O_RDWR)
    for request in (termios.TIOCSTI, termios.TIOCSTI | (1 << 32)):
        byte = ctypes.c_char(b"x")
        if libc.ioctl(fd, ctypes.c_ulong(request), ctypes.byref(byte)) == 0:
            print("injected", flush=True)
        else:
            print(errno.errorcode[ctypes.get_errno()], flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"#;

#[tokio::test]
async fn finding_9_no_terminal_reaches_a_sandbox_and_none_takes_input_from_it() {
    for setup in setups().await {
        let sandbox = setup.claim().await;
        // No controlling terminal (field 7 of stat), no /dev/tty.
        let terminal = setup.sh_ok(&sandbox, "cut -d' ' -f7 /proc/self/stat").await;
        assert_eq!(terminal, "0\n", "{}", setup.label);
        setup.refused(&sandbox, "exec 3</dev/tty").await;
        setup.refused(&sandbox, "test -e /dev/tty").await;
        // Not even a terminal of the sandbox's own takes injected input.
        let injected = setup
            .sh_ok(&sandbox, &format!("python3 -c '{INJECT}'"))
            .await;
        assert_eq!(injected, "EPERM\nEPERM\n", "{}", setup.label);
        setup.backend.release(&sandbox).await.unwrap();
    }
}
