//! The code that runs between `fork` and `execve`: system calls on data
//! prepared before `fork`, nothing that allocates or takes a lock (the
//! parent is multi-threaded, so another thread may hold the allocator's).

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::libc;

use super::Namespaces;

/// What the child needs, all of it made before `fork`.
pub(super) struct Plan {
    pub(super) ruleset: Option<RawFd>,
    pub(super) namespaces: Option<Namespaces>,
    pub(super) report: RawFd,
}

// The steps that can fail, as written to the report pipe.
const STEPS: &[&str] = &[
    "do anything",
    "create a user namespace",
    "map the user and group ids into the user namespace",
    "create mount, PID, IPC and network namespaces",
    "fork into the PID namespace",
    "make the mounts private",
    "bind a control path",
    "make a control path read-only",
    "drop root's capabilities",
    "set no_new_privs",
    "apply the Landlock ruleset",
    "hide a secret path",
    "find the working folder again under the covers",
];
const USER_NS: u8 = 1;
const ID_MAP: u8 = 2;
const OTHER_NS: u8 = 3;
const FORK: u8 = 4;
const PRIVATE: u8 = 5;
const BIND: u8 = 6;
const READ_ONLY: u8 = 7;
const SECUREBITS: u8 = 8;
const NO_NEW_PRIVS: u8 = 9;
const LANDLOCK: u8 = 10;
const MASK: u8 = 11;
const CWD: u8 = 12;

/// Makes the tree at `path` a mount of its own, its submounts with it.
///
/// # Safety
///
/// A system call on a C string prepared before fork.
unsafe fn bind_to_itself(path: &std::ffi::CStr) -> bool {
    // SAFETY: as the function says.
    unsafe {
        libc::mount(
            path.as_ptr(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ) == 0
    }
}

/// Sets the per-mount `flags` of the mount at `path` (read-only, …).
///
/// # Safety
///
/// A system call on a C string prepared before fork.
unsafe fn remount(path: &std::ffi::CStr, flags: libc::c_ulong) -> bool {
    // SAFETY: as the function says.
    unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | flags,
            std::ptr::null(),
        ) == 0
    }
}

/// `open_tree(2)`: a detached copy of the mount tree, not the tree itself.
const OPEN_TREE_CLONE: libc::c_uint = 1;
/// `open_tree(2)`: the submounts too.
const AT_RECURSIVE: libc::c_uint = 0x8000;
/// `move_mount(2)`: the source is the descriptor itself.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// `SECBIT_NOROOT | SECBIT_NOROOT_LOCKED`: uid 0 gains no capabilities at `execve`.
const NOROOT: libc::c_ulong = 0b11;

pub(super) fn step_name(step: u8) -> &'static str {
    STEPS.get(usize::from(step)).copied().unwrap_or(STEPS[0])
}

/// The Landlock ABI version, 0 without Landlock.
pub(super) fn landlock_abi() -> i32 {
    // SAFETY: `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`
    // only returns a number; no memory is passed.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    i32::try_from(version).unwrap_or(0).max(0)
}

pub(super) fn install(command: &mut std::process::Command, plan: Plan) {
    // SAFETY: the closure runs in the child between `fork` and `execve`;
    // `apply` makes only async-signal-safe system calls on data prepared
    // before `fork` (no allocation, no locks).
    unsafe {
        command.pre_exec(move || apply(&plan));
    }
}

/// Makes the process `command` starts die (`SIGKILL`) when the thread
/// that started it ends, and not start at all when its parent is gone
/// already: a native extension whose bridge is killed (zot's `SIGKILL`, a
/// crash) is not left running, unseen, with the user's permissions. The
/// thread is a runtime's, which lives as long as the process.
pub(super) fn die_with_parent(command: &mut std::process::Command) {
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the child between `fork` and `execve`
    // and makes only async-signal-safe system calls (prctl(2), getppid(2),
    // _exit(2)), with no allocation or lock.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the line above: no signal will come.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// The pid a forwarding handler passes signals to.
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(signal: libc::c_int) {
    let pid = FORWARD_TO.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

fn failed(plan: &Plan, step: u8) -> io::Error {
    let error = io::Error::last_os_error();
    // SAFETY: writes one byte from the stack to an fd that stays open.
    unsafe {
        libc::write(plan.report, (&raw const step).cast(), 1);
    }
    error
}

fn apply(plan: &Plan) -> io::Result<()> {
    if let Some(namespaces) = &plan.namespaces {
        enter(plan, namespaces)?;
    }
    restrict(plan)?;
    close_inherited_at_exec();
    Ok(())
}

/// Marks every descriptor past stdin, stdout and stderr close-on-exec: one
/// the process that started zotbox left open (a file of the user's home, a
/// terminal, on which `TIOCSTI` types commands into the user's shell) is
/// not the command's. Landlock checks paths as they are opened, not a
/// descriptor opened before. Marked rather than closed, so that the
/// standard library's own pipe still reports a failed `execve`.
fn close_inherited_at_exec() {
    // SAFETY: close_range(2) and fcntl(2) take plain numbers.
    unsafe {
        let marked = libc::syscall(
            libc::SYS_close_range,
            3u32,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if marked != 0 {
            // Before Linux 5.11: one by one, as far as descriptors go here.
            for fd in 3..4096 {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
    }
}

/// Writes `data` to the file at `path`.
fn write_file(path: &CStr, data: &[u8]) -> bool {
    // SAFETY: open/write/close on a C string and a slice that outlive the calls.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        usize::try_from(written).is_ok_and(|n| n == data.len())
    }
}

/// Closes every descriptor but those in `keep` (ascending).
fn close_all_except(keep: &[RawFd]) {
    let mut first: libc::c_uint = 0;
    for fd in keep {
        let Ok(fd) = libc::c_uint::try_from(*fd) else {
            continue;
        };
        if fd > first {
            // SAFETY: close_range(2) takes plain numbers.
            unsafe {
                libc::syscall(libc::SYS_close_range, first, fd - 1, 0u32);
            }
        }
        first = fd.saturating_add(1);
    }
    // SAFETY: as above.
    unsafe {
        libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0u32);
    }
}

/// Forwards the signals a host sends to end a process to `pid`.
fn forward_signals_to(pid: libc::pid_t) {
    FORWARD_TO.store(pid, Ordering::Relaxed);
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: a zeroed sigaction with a handler that only calls kill(2).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = forward as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(signal, &raw const action, std::ptr::null_mut());
        }
    }
}

/// Waits for `pid`, reaping any other child meanwhile; its wait status.
fn wait_for(pid: libc::pid_t) -> Option<libc::c_int> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) writes one int on the stack.
        let reaped = unsafe { libc::waitpid(-1, &raw mut status, 0) };
        if reaped == pid {
            return Some(status);
        }
        if reaped < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// Ends this process the way `status` ended its child: the same exit
/// code, or (`raise`) the same signal.
fn mirror(status: Option<libc::c_int>, raise: bool) -> ! {
    let Some(status) = status else {
        // SAFETY: _exit(2) ends the process without running Rust code.
        unsafe { libc::_exit(1) }
    };
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        if raise {
            // SAFETY: default disposition, unblocked, then the signal to ourselves.
            unsafe {
                libc::signal(signal, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&raw mut set);
                libc::sigaddset(&raw mut set, signal);
                libc::sigprocmask(libc::SIG_UNBLOCK, &raw const set, std::ptr::null_mut());
                libc::kill(libc::getpid(), signal);
            }
        }
        // SAFETY: as above.
        unsafe { libc::_exit(128 + signal) }
    }
    // SAFETY: as above.
    unsafe { libc::_exit(libc::WEXITSTATUS(status)) }
}

/// Enters the namespaces. Returns only in the process that goes on to
/// `execve` the command; the two above it wait and mirror its end.
fn enter(plan: &Plan, namespaces: &Namespaces) -> io::Result<()> {
    // SAFETY (whole block): system calls on descriptors and C strings
    // prepared before fork, and on buffers on this stack.
    unsafe {
        if libc::unshare(libc::CLONE_NEWUSER) != 0 {
            return Err(failed(plan, USER_NS));
        }
        // `setgroups` must be denied before an unprivileged gid map.
        write_file(c"/proc/self/setgroups", b"deny");
        if !write_file(c"/proc/self/uid_map", &namespaces.uid_map)
            || !write_file(c"/proc/self/gid_map", &namespaces.gid_map)
        {
            return Err(failed(plan, ID_MAP));
        }
        let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
        if namespaces.network {
            flags |= libc::CLONE_NEWNET;
        }
        if libc::unshare(flags) != 0 {
            return Err(failed(plan, OTHER_NS));
        }
        // `alive`: the init learns whether the outer process died before
        // it could ask to die with it. `exit`: the init tells the outer
        // process which signal ended the command.
        let mut alive = [0; 2];
        let mut exit = [0; 2];
        if libc::pipe2(alive.as_mut_ptr(), libc::O_CLOEXEC) != 0
            || libc::pipe2(exit.as_mut_ptr(), libc::O_CLOEXEC) != 0
        {
            return Err(failed(plan, FORK));
        }
        let init = libc::fork();
        if init < 0 {
            return Err(failed(plan, FORK));
        }
        if init > 0 {
            outer(init, alive[1], exit[0]);
        }
        // The namespace's init (pid 1).
        libc::close(alive[1]);
        libc::close(exit[0]);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let mut poll = libc::pollfd {
            fd: alive[0],
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&raw mut poll, 1, 0) != 0 {
            // The outer process is gone already.
            libc::_exit(1);
        }
        libc::close(alive[0]);
        let command = libc::fork();
        if command < 0 {
            return Err(failed(plan, FORK));
        }
        if command > 0 {
            init_process(command, exit[1]);
        }
        libc::close(exit[1]);
        // The command: make the control paths read-only, then go on.
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(failed(plan, PRIVATE));
        }
        // A writable folder inside a read-only one is a mount of its own
        // first, which the read-only bind above it carries along.
        for path in &namespaces.writable {
            if !bind_to_itself(path) {
                return Err(failed(plan, BIND));
            }
        }
        for (path, locked) in &namespaces.binds {
            if !bind_to_itself(path) {
                return Err(failed(plan, BIND));
            }
            if libc::mount(
                std::ptr::null(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | locked,
                std::ptr::null(),
            ) != 0
            {
                return Err(failed(plan, READ_ONLY));
            }
        }
        // The working folder, by name, entered again after the covers: so
        // the process holds it as the covered tree has it, whichever runs
        // first, this or the `current_dir` of the caller's command.
        let mut cwd = [0 as libc::c_char; libc::PATH_MAX as usize];
        let named = !libc::getcwd(cwd.as_mut_ptr(), cwd.len()).is_null();
        // Secret paths: an empty, read-only folder over a folder, `/dev/null`
        // over a file (on a `nodev` mount, so even opening it fails): a
        // command reads nothing of them. A writable folder inside a covered
        // one is copied as a detached mount first, then moved back to its
        // path, made anew in the cover, before the cover turns read-only.
        for mask in &namespaces.masks {
            let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            let hidden = if mask.folder {
                let mut trees = [-1; super::MAX_RESTORES];
                for (tree, restore) in trees.iter_mut().zip(&mask.restore) {
                    if let Some(target) = restore.dirs.last() {
                        *tree = libc::syscall(
                            libc::SYS_open_tree,
                            libc::AT_FDCWD,
                            target.as_ptr(),
                            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE,
                        ) as libc::c_int;
                    }
                }
                let opened = trees.iter().take(mask.restore.len()).all(|tree| *tree >= 0);
                let covered = opened
                    && libc::mount(
                        c"tmpfs".as_ptr(),
                        mask.path.as_ptr(),
                        c"tmpfs".as_ptr(),
                        flags & !libc::MS_RDONLY,
                        c"size=64k,mode=0500".as_ptr().cast(),
                    ) == 0;
                // A folder gone since it was listed (one at the top of `/`)
                // holds nothing to hide, and nothing was to be moved back
                // into it.
                if opened
                    && !covered
                    && mask.restore.is_empty()
                    && io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT)
                {
                    continue;
                }
                covered
                    && mask.restore.iter().zip(trees).all(|(restore, tree)| {
                        restore.dirs.iter().all(|dir| {
                            libc::mkdir(dir.as_ptr(), 0o700) == 0
                                || io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST)
                        }) && restore.dirs.last().is_some_and(|target| {
                            libc::syscall(
                                libc::SYS_move_mount,
                                tree,
                                c"".as_ptr(),
                                libc::AT_FDCWD,
                                target.as_ptr(),
                                MOVE_MOUNT_F_EMPTY_PATH,
                            ) == 0
                        })
                    })
                    && remount(&mask.path, flags)
            } else {
                libc::mount(
                    c"/dev/null".as_ptr(),
                    mask.path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ) == 0
                    && remount(&mask.path, flags)
            };
            if !hidden {
                return Err(failed(plan, MASK));
            }
        }
        // A working folder the covers hid (none given to the command), or
        // one without a name (removed), is left for the root.
        if !(named && libc::chdir(cwd.as_ptr()) == 0) && libc::chdir(c"/".as_ptr()) != 0 {
            return Err(failed(plan, CWD));
        }
        if libc::prctl(libc::PR_SET_SECUREBITS, NOROOT) != 0 {
            return Err(failed(plan, SECUREBITS));
        }
    }
    Ok(())
}

/// The process zotbox spawned: waits for the namespace's init and ends
/// as the command did.
fn outer(init: libc::pid_t, alive: RawFd, exit: RawFd) -> ! {
    let mut keep = [alive, exit];
    keep.sort_unstable();
    close_all_except(&keep);
    // SAFETY: resetting SIGCHLD drops a handler inherited from the host.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
    forward_signals_to(init);
    let status = wait_for(init);
    let mut signal = [0u8; 1];
    // SAFETY: a one-byte read into the stack; the init wrote it before exiting.
    let read = unsafe { libc::read(exit, signal.as_mut_ptr().cast(), 1) };
    if read == 1 {
        let killed = libc::c_int::from(signal[0]) & 0x7f;
        // A wait status meaning "killed by `killed`".
        mirror(Some(killed), true);
    }
    mirror(status, false)
}

/// The namespace's init: reaps everything, forwards the host's signals
/// to the command, and ends when the command does (the kernel then kills
/// whatever is left in the namespace).
fn init_process(command: libc::pid_t, exit: RawFd) -> ! {
    close_all_except(&[exit]);
    forward_signals_to(command);
    let status = wait_for(command);
    if let Some(status) = status
        && libc::WIFSIGNALED(status)
        && let Ok(signal) = u8::try_from(libc::WTERMSIG(status))
    {
        // SAFETY: a one-byte write from the stack.
        unsafe {
            libc::write(exit, (&raw const signal).cast(), 1);
        }
    }
    mirror(status, false)
}

/// Landlock, after `no_new_privs`.
fn restrict(plan: &Plan) -> io::Result<()> {
    // SAFETY: prctl(2) and landlock_restrict_self(2) with plain numbers.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(failed(plan, NO_NEW_PRIVS));
        }
        if let Some(ruleset) = plan.ruleset
            && libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0
        {
            return Err(failed(plan, LANDLOCK));
        }
    }
    Ok(())
}
