//! A new output file: written under `<path>.partial` and moved to `<path>` only when
//! complete, without ever writing through or replacing anything that was there.
//!
//! - The partial file is created with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600: an
//!   existing `<path>.partial` (a file, or a symlink planted to redirect the write) is an
//!   error, never opened.
//! - It is moved with `renameat2(RENAME_NOREPLACE)` (or, where the filesystem lacks it,
//!   `link` then `unlink`, which also fail on an existing target): a `<path>` that
//!   appeared meanwhile — file, directory or symlink — is never replaced.
//! - A [`NewFile`] dropped before [`NewFile::persist`] (any error on the way) removes its
//!   partial file, after checking that the name still points at the file it created.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The file being written, and where it goes when done.
pub struct NewFile {
    partial: PathBuf,
    target: PathBuf,
    /// Device and inode of the partial file, to remove only our own.
    id: (u64, u64),
    done: bool,
}

/// `<path>.partial`.
pub fn partial_path(target: &Path) -> PathBuf {
    let mut p = target.as_os_str().to_owned();
    p.push(".partial");
    PathBuf::from(p)
}

impl NewFile {
    /// Creates `<target>.partial` (mode 0600) for writing; fails if `target` or the
    /// partial file already exists, whatever they are.
    pub fn create(target: &Path) -> Result<(NewFile, File), String> {
        if target.symlink_metadata().is_ok() {
            return Err(format!(
                "{}: already exists; not overwritten",
                target.display()
            ));
        }
        let partial = partial_path(target);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&partial)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => format!(
                    "{}: already exists (left by an interrupted run, or someone else's); remove it and try again",
                    partial.display()
                ),
                _ => format!("{}: cannot create: {e}", partial.display()),
            })?;
        let meta = file
            .metadata()
            .map_err(|e| format!("{}: {e}", partial.display()))?;
        Ok((
            NewFile {
                partial,
                target: target.to_path_buf(),
                id: (meta.dev(), meta.ino()),
                done: false,
            },
            file,
        ))
    }

    /// Moves the finished file (already flushed and synced by the caller) to its name,
    /// failing rather than replacing anything there.
    pub fn persist(mut self) -> Result<(), String> {
        let from = cstring(&self.partial)?;
        let to = cstring(&self.target)?;
        // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them as given.
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if rc != 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                // No RENAME_NOREPLACE on this filesystem or kernel: link(2) fails on an
                // existing target just the same.
                Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => {
                    std::fs::hard_link(&self.partial, &self.target)
                        .map_err(|e| self.move_error(e))?;
                    let _ = std::fs::remove_file(&self.partial);
                }
                _ => return Err(self.move_error(err)),
            }
        }
        self.done = true;
        Ok(())
    }

    fn move_error(&self, e: io::Error) -> String {
        if e.kind() == io::ErrorKind::AlreadyExists {
            format!(
                "{}: appeared while the bundle was written; not overwritten",
                self.target.display()
            )
        } else {
            format!(
                "{}: cannot move {} into place: {e}",
                self.target.display(),
                self.partial.display()
            )
        }
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Ok(m) = self.partial.symlink_metadata()
            && (m.dev(), m.ino()) == self.id
        {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}

fn cstring(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| format!("{}: path contains a NUL byte", p.display()))
}
