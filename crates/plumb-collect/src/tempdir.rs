//! A private temporary directory, removed with everything in it on drop (bundle
//! extraction and bundle staging; no tempfile dependency for two uses).

use std::path::{Path, PathBuf};

pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/<prefix>-<pid>-<n>`; fails rather than reuse an existing one.
    pub fn create(prefix: &str) -> Result<TempDir, String> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(TempDir(p))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
