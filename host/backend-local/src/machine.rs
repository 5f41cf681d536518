//! What this machine has to offer: cores, available memory and free disk.

use std::fs;
use std::path::Path;

use crate::error::{IoContext, LocalError};

/// Cores this process may use.
pub(crate) fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// `MemAvailable` from `/proc/meminfo`, in MiB: memory that can be used
/// without swapping.
pub(crate) fn memory_available_mib() -> Result<u64, LocalError> {
    let meminfo = fs::read_to_string("/proc/meminfo").context(|| "reading /proc/meminfo".into())?;
    meminfo
        .lines()
        .find_map(|line| {
            let kib = line
                .strip_prefix("MemAvailable:")?
                .trim()
                .strip_suffix("kB")?;
            kib.trim().parse::<u64>().ok()
        })
        .map(|kib| kib / 1024)
        .ok_or_else(|| LocalError::Failed("/proc/meminfo has no MemAvailable line".into()))
}

/// Space available to unprivileged users on the filesystem holding `path`,
/// in MiB.
pub(crate) fn disk_free_mib(path: &Path) -> Result<u64, LocalError> {
    let stat = rustix::fs::statvfs(path)
        .map_err(std::io::Error::from)
        .context(|| format!("statvfs {}", path.display()))?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize) / (1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_reports_something() {
        assert!(cores() >= 1);
        assert!(memory_available_mib().unwrap() > 0);
        assert!(disk_free_mib(Path::new("/")).unwrap() > 0);
        let error = disk_free_mib(Path::new("/no/such/dir"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("/no/such/dir"), "{error}");
    }
}
