//! A file made at its full size (its blocks reserved, zero-filled) and mapped shared into
//! memory, appended to by copying into the mapping: the settle journal's files
//! ([`super::journal`]). The pages are the file's page cache, as a `write` would have
//! filled them, so what was copied in survives the process (`kill -9` included), not the
//! machine.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

/// The page size the ranges of [`Ahead`] are aligned to.
const PAGE: usize = 4096;

/// A shared mapping of a whole file, unmapped when the last holder lets it go.
struct Mapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the pointer is written only by the `MappedFile` that made the mapping, through
// `&mut self`; another holder (an [`Ahead`]) only passes the address to `madvise`, which
// never changes what the pages hold.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `MappedFile::create`, unmapped once, when nothing
        // holds it any more; its pages stay in the file's page cache.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// One mapped file, and how much of it is written.
pub struct MappedFile {
    map: Arc<Mapping>,
    /// Bytes written so far.
    used: usize,
    /// Bytes made writable ahead of the appends ([`MappedFile::ahead`]).
    ahead: usize,
    _file: File,
}

/// Pages of a mapped file to make writable before an append reaches them: the write
/// fault each first write to a page of a shared file mapping takes (the page read into
/// the cache, zeroed, its block readied) is then taken in one call, off the request's
/// path, instead of one trap a page on it.
pub struct Ahead {
    map: Arc<Mapping>,
    from: usize,
    to: usize,
}

impl Ahead {
    /// Makes the pages writable (`MADV_POPULATE_WRITE`, Linux 5.14); where the kernel
    /// cannot, the appends take their faults as before.
    pub fn run(self) {
        // SAFETY: `from..to` lies inside the mapping, which `self.map` keeps mapped for
        // the whole call; populating pages does not change what they hold.
        unsafe {
            libc::madvise(
                self.map.ptr.as_ptr().add(self.from).cast(),
                self.to - self.from,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }
}

impl MappedFile {
    /// Makes a new file of `len` bytes at `path` (refused if one is there) and maps it.
    pub fn create(path: &Path, len: usize) -> std::io::Result<MappedFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        let fd = file.as_raw_fd();
        // Every block is reserved now: a page written through the mapping into a hole
        // the disk could not fill would kill the process (SIGBUS) instead of failing.
        // SAFETY: a plain call on a descriptor this function owns.
        let r = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
        if r != 0 {
            let _ = std::fs::remove_file(path);
            return Err(std::io::Error::from_raw_os_error(r));
        }
        // SAFETY: a new shared mapping of `len` bytes of a file that is `len` bytes long;
        // the kernel checks the arguments, and a failure is returned, not undefined.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        let map = Mapping {
            ptr: std::ptr::NonNull::new(ptr.cast()).ok_or(std::io::ErrorKind::Other)?,
            len,
        };
        Ok(MappedFile {
            map: Arc::new(map),
            used: 0,
            ahead: 0,
            _file: file,
        })
    }

    /// The pages from the last made writable up to `bytes` past what is written, if
    /// any are left (the file ends there at the latest).
    pub fn ahead(&mut self, bytes: usize) -> Option<Ahead> {
        let from = self.ahead.max(self.used) / PAGE * PAGE;
        let to = (self.used + bytes).div_ceil(PAGE) * PAGE;
        let to = to.min(self.map.len);
        if to <= from {
            return None;
        }
        self.ahead = to;
        Some(Ahead {
            map: self.map.clone(),
            from,
            to,
        })
    }

    /// Appends `parts`, one after the other, if they fit together; `false` (nothing
    /// written) if they do not.
    pub fn append(&mut self, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.map.len - self.used {
            return false;
        }
        for bytes in parts {
            // SAFETY: the range `used..used + bytes.len()` lies inside the mapping (all
            // the parts fit, checked above), which lives as long as `self`; `bytes`
            // cannot overlap it (nothing else sees the mapping).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.map.ptr.as_ptr().add(self.used),
                    bytes.len(),
                );
            }
            self.used += bytes.len();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_are_in_the_file_at_once_until_it_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = MappedFile::create(&path, 4096).unwrap();
        assert!(f.append(&[b"one\n"]));
        assert!(f.append(&[b"two", b"\n"]));
        // Read through the file, not the mapping, while it is still mapped.
        let text = std::fs::read(&path).unwrap();
        assert_eq!(text.len(), 4096, "made at its full size");
        assert_eq!(&text[..8], b"one\ntwo\n");
        assert!(text[8..].iter().all(|&b| b == 0), "the rest is zeros");
        assert!(
            !f.append(&[&[b'x'; 4089]]),
            "a line that does not fit is not written"
        );
        assert!(
            f.append(&[&[b'x'; 4000], &[b'x'; 88]]),
            "one that fits exactly is"
        );
        drop(f);
        assert_eq!(
            std::fs::read(&path).unwrap()[4095],
            b'x',
            "kept after unmapping"
        );
        assert!(
            MappedFile::create(&path, 4096).is_err(),
            "an existing file is refused"
        );
    }

    #[test]
    fn pages_made_writable_ahead_keep_what_is_written_and_are_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = MappedFile::create(&path, 8 * PAGE).unwrap();
        assert!(f.append(&[b"first\n"]));
        let a = f.ahead(PAGE + 1).unwrap();
        assert_eq!(
            (a.from, a.to),
            (0, 2 * PAGE),
            "whole pages, from the cursor's"
        );
        a.run();
        assert!(f.ahead(PAGE).is_none(), "nothing new to make writable");
        assert!(f.append(&[&[b'y'; PAGE]]));
        let b = f.ahead(2 * PAGE).unwrap();
        assert_eq!((b.from, b.to), (2 * PAGE, 4 * PAGE), "on from the last");
        drop(f);
        // The mapping outlives the file's writer while a range is being made writable.
        b.run();
        let text = std::fs::read(&path).unwrap();
        assert_eq!(&text[..6], b"first\n");
        assert!(text[6..6 + PAGE].iter().all(|&c| c == b'y'));
        assert!(
            text[6 + PAGE..].iter().all(|&c| c == 0),
            "the rest is zeros"
        );
        let mut g = MappedFile::create(&dir.path().join("g"), 2 * PAGE).unwrap();
        assert_eq!(
            g.ahead(100 * PAGE).map(|a| a.to),
            Some(2 * PAGE),
            "never past the end"
        );
    }
}
