//! A file made at its full size (its blocks reserved, zero-filled) and mapped shared into
//! memory, appended to by copying into the mapping: the settle journal's files
//! ([`super::journal`]). The pages are the file's page cache, as a `write` would have
//! filled them, so what was copied in survives the process (`kill -9` included), not the
//! machine.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;

/// One mapped file, and how much of it is written.
pub struct MappedFile {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    /// Bytes written so far.
    used: usize,
    _file: File,
}

// SAFETY: the mapping is owned by this value alone (nothing else holds its pointer), and
// is only written through `&mut self`.
unsafe impl Send for MappedFile {}

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
        Ok(MappedFile {
            ptr: std::ptr::NonNull::new(ptr.cast()).ok_or(std::io::ErrorKind::Other)?,
            len,
            used: 0,
            _file: file,
        })
    }

    /// Appends `parts`, one after the other, if they fit together; `false` (nothing
    /// written) if they do not.
    pub fn append(&mut self, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.len - self.used {
            return false;
        }
        for bytes in parts {
            // SAFETY: the range `used..used + bytes.len()` lies inside the mapping (all
            // the parts fit, checked above), which lives as long as `self`; `bytes`
            // cannot overlap it (nothing else sees the mapping).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.ptr.as_ptr().add(self.used),
                    bytes.len(),
                );
            }
            self.used += bytes.len();
        }
        true
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create`, unmapped once; its pages stay in the
        // file's page cache.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
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
}
