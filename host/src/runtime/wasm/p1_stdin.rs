//! fd 0 of a WASI preview 1 guest as a non-blocking pipe, so a program with
//! its own scheduler (Go) keeps running while it waits for input.
//!
//! Go on `wasip1` runs every goroutine on one thread. It puts stdin under
//! its poller only when `fd_fdstat_get` on fd 0 reports `FDFLAG_NONBLOCK`;
//! otherwise the goroutine reading stdin blocks the whole program in
//! `fd_read`, and no handler goroutine ever writes its answer.
//!
//! Rules:
//!
//! - **fd 0 says it is non-blocking.** `fd_fdstat_get(0)` answers what
//!   wasmtime answers, with `FDFLAG_NONBLOCK` added.
//! - **`EAGAIN` only for a guest that was told.** Once the guest has read
//!   fd 0's flags (or set them with `FDFLAG_NONBLOCK`), `fd_read(0)` with no
//!   input buffered returns `EAGAIN` instead of waiting. A guest that never
//!   asked keeps blocking reads: C's stdio and Rust's `std` read fd 0
//!   without asking, and an `EAGAIN` would end their read loop.
//!   `fd_fdstat_set_flags(0, …)` without `FDFLAG_NONBLOCK` makes reads block
//!   again.
//! - **`poll_oneoff` wakes from the pipe.** An `fd_read` subscription on fd 0
//!   is wasmtime's, over the in-memory pipe's pollable: a host write wakes
//!   it, and while it waits the guest counts as idle (parked on stdin).
//! - **Everything else is wasmtime's.** Other fds, and fd 0 of a guest that
//!   never asked, go to wasmtime's preview 1 unchanged; a bad pointer is
//!   `EFAULT`, never a host panic.

use bytes::Bytes;
use wasmtime::{Caller, Extern, Linker};
use wasmtime_wasi::p1::wasi_snapshot_preview1 as p1;
use wiggle::GuestMemory;

use super::guest::ModuleState;
use super::pipe::Took;

const MODULE: &str = "wasi_snapshot_preview1";

/// `fdflags::nonblock`.
pub(crate) const FDFLAG_NONBLOCK: u16 = 1 << 2;
/// `errno::again`.
pub(crate) const EAGAIN: i32 = 6;
/// `errno::fault`.
const EFAULT: i32 = 21;
/// Where `fdflags` sits in an `fdstat` (after the `u8` file type, aligned).
const FDSTAT_FLAGS_OFFSET: usize = 2;

/// The guest's memory and its store data, as wiggle's own glue finds them.
fn split<'a>(
    caller: &'a mut Caller<'_, ModuleState>,
) -> wasmtime::Result<(&'a mut [u8], &'a mut ModuleState)> {
    match caller.get_export("memory") {
        Some(Extern::Memory(memory)) => Ok(memory.data_and_store_mut(caller)),
        _ => wasmtime::bail!("missing required memory export"),
    }
}

/// Adds the fd 0 versions of `fd_fdstat_get`, `fd_fdstat_set_flags` and
/// `fd_read` over wasmtime's.
pub(crate) fn add_to_linker(linker: &mut Linker<ModuleState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = define(linker);
    linker.allow_shadowing(false);
    defined
}

fn define(linker: &mut Linker<ModuleState>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        MODULE,
        "fd_fdstat_get",
        |mut caller: Caller<'_, ModuleState>, (fd, out): (i32, i32)| {
            Box::new(async move {
                let (memory, state) = split(&mut caller)?;
                let errno = {
                    let mut guest = GuestMemory::Unshared(&mut *memory);
                    p1::fd_fdstat_get(&mut state.p1, &mut guest, fd, out).await?
                };
                if fd != 0 || errno != 0 {
                    return Ok(errno);
                }
                let Some(flags) = range(memory, out, FDSTAT_FLAGS_OFFSET, 2) else {
                    return Ok(EFAULT);
                };
                let old = u16::from_le_bytes([flags[0], flags[1]]);
                flags.copy_from_slice(&(old | FDFLAG_NONBLOCK).to_le_bytes());
                state.stdin_nonblocking = true;
                Ok(0)
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "fd_fdstat_set_flags",
        |mut caller: Caller<'_, ModuleState>, (fd, flags): (i32, i32)| {
            Box::new(async move {
                if fd == 0 {
                    let nonblock = i32::from(FDFLAG_NONBLOCK);
                    // Only the non-blocking bit means anything on a pipe.
                    if flags & !nonblock != 0 {
                        return Ok(28); // errno::inval
                    }
                    caller.data_mut().stdin_nonblocking = flags & nonblock != 0;
                    return Ok(0);
                }
                let (memory, state) = split(&mut caller)?;
                let mut guest = GuestMemory::Unshared(memory);
                p1::fd_fdstat_set_flags(&mut state.p1, &mut guest, fd, flags)
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "fd_read",
        |mut caller: Caller<'_, ModuleState>, (fd, iovs, len, nread): (i32, i32, i32, i32)| {
            Box::new(async move {
                let (memory, state) = split(&mut caller)?;
                if fd != 0 || !state.stdin_nonblocking {
                    let mut guest = GuestMemory::Unshared(memory);
                    return p1::fd_read(&mut state.p1, &mut guest, fd, iovs, len, nread).await;
                }
                let Some(buffers) = iovecs(memory, iovs, len) else {
                    return Ok(EFAULT);
                };
                let wanted = buffers.iter().map(|&(_, n)| n).sum::<usize>();
                let read = match state.stdin.try_take(wanted) {
                    Took::Bytes(bytes) => bytes,
                    Took::End => Bytes::new(),
                    Took::Nothing => return Ok(EAGAIN),
                };
                Ok(scatter(memory, &buffers, &read, nread))
            })
        },
    )?;
    Ok(())
}

/// `len` bytes of guest memory at `base + offset`, if they are all inside it.
fn range(memory: &mut [u8], base: i32, offset: usize, len: usize) -> Option<&mut [u8]> {
    let start = usize::try_from(base as u32).ok()?.checked_add(offset)?;
    memory.get_mut(start..start.checked_add(len)?)
}

/// The `(pointer, length)` of each of the `len` iovecs at `iovs`, each
/// checked to lie inside guest memory.
fn iovecs(memory: &mut [u8], iovs: i32, len: i32) -> Option<Vec<(usize, usize)>> {
    let count = usize::try_from(len as u32).ok()?;
    let table = range(memory, iovs, 0, count.checked_mul(8)?)?.to_vec();
    let mut buffers = Vec::with_capacity(count.min(1024));
    for entry in table.chunks_exact(8) {
        let pointer = u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]);
        let size = u32::from_le_bytes([entry[4], entry[5], entry[6], entry[7]]);
        let (pointer, size) = (usize::try_from(pointer).ok()?, usize::try_from(size).ok()?);
        pointer
            .checked_add(size)
            .filter(|&end| end <= memory.len())?;
        buffers.push((pointer, size));
    }
    Some(buffers)
}

/// Copies `read` into `buffers` in order and stores its length at `nread`;
/// the errno to return.
fn scatter(memory: &mut [u8], buffers: &[(usize, usize)], read: &[u8], nread: i32) -> i32 {
    let Ok(count) = u32::try_from(read.len()) else {
        return EFAULT;
    };
    let Some(out) = range(memory, nread, 0, 4) else {
        return EFAULT;
    };
    out.copy_from_slice(&count.to_le_bytes());
    let mut rest = read;
    for &(pointer, size) in buffers {
        if rest.is_empty() {
            break;
        }
        let n = size.min(rest.len());
        // In bounds: `iovecs` checked every buffer against the memory.
        if let Some(buffer) = memory.get_mut(pointer..pointer + n) {
            buffer.copy_from_slice(&rest[..n]);
        }
        rest = &rest[n..];
    }
    0
}
