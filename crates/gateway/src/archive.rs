//! Audit log archiving (issue 14 item 5): export a verified prefix of the audit log to a
//! JSON Lines file, then checkpoint and prune it in the store, so that the database stops
//! growing with the log while `audit verify` still proves the records kept.
//!
//! [`archive_audit`] does it in this order, and stops at the first problem:
//!
//! 1. verify the whole log as stored, from its latest checkpoint
//!    ([`AuditSink::verify_audit_log`]) — a log that does not verify is never archived;
//! 2. choose the segment: from the record after the latest checkpoint (record 1 if none)
//!    through a sequence number, or through the last record of the unbroken run older than a
//!    cutoff;
//! 3. write it, verifying the chain record by record, to a hidden temporary file in the
//!    target directory, `fsync` it, link it to its final name (never over an existing file)
//!    and `fsync` the directory;
//! 4. read the file back from disk, verify its chain again from the checkpoint and hash it
//!    (SHA-256);
//! 5. [`AuditSink::archive_audit`]: in one transaction under the appenders' lock, the store
//!    checks the segment against its records, stores the signed checkpoint and deletes the
//!    segment's records.
//!
//! An archive file is one record per line, exactly as `secureclaw audit export` prints them
//! (`seq`, `event`, `kid`, `prev`, `mac`), so that it verifies offline with the audit key:
//! [`verify_archive_file`] finds the checkpoint naming the file's digest and checks that the
//! file's records chain from the previous checkpoint and end at this one's record, count and
//! MAC — archives and the records kept are one chain.

use secureclaw_core::audit::{
    ArchiveSegment, AuditCheckpoint, AuditError, AuditRecord, ChainVerifier, archive_start,
    check_archive_end,
};
use secureclaw_core::keys::KeyRing;
use secureclaw_core::store::{AuditSink, StoreError};
use secureclaw_core::time::UnixMillis;
use sha2::{Digest, Sha256};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// Records read from the store per page.
const PAGE: usize = 1000;

/// Which records to archive (always from the first record after the latest checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveBound {
    /// Through this sequence number (inclusive). Must be a stored record.
    Through(u64),
    /// Through the last record of the run, from the first kept, whose events happened
    /// before this time (the run stops at the first record at or after it).
    OlderThan(UnixMillis),
}

/// Where the archive file goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveTarget {
    /// This file (it must not exist).
    File(PathBuf),
    /// A new file in this directory, named
    /// `audit-<first seq>-<last seq>-<archive time in ms>.jsonl` (sequence numbers padded to
    /// 12 digits, so that names sort in log order).
    Dir(PathBuf),
}

/// Why archiving or verifying an archive failed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The log does not verify as stored: nothing was written or pruned.
    #[error("the audit log does not verify, so nothing was archived: {0}")]
    Unverified(StoreError),
    /// The store failed or refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A chain or checkpoint check failed.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The sequence number asked for is not a stored record after the latest checkpoint.
    #[error("cannot archive through seq {asked}: the log holds records {first}..={last}")]
    OutOfRange {
        /// Asked for.
        asked: u64,
        /// First record kept.
        first: u64,
        /// Last record.
        last: u64,
    },
    /// The archive file exists already (archives are never overwritten).
    #[error("`{0}` already exists: archives are never overwritten")]
    Exists(PathBuf),
    /// File I/O failed.
    #[error("`{path}`: {err}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        err: std::io::Error,
    },
    /// A line of an archive file is not an audit record.
    #[error("`{path}` line {line}: not an audit record: {err}")]
    Format {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The decoder's message.
        err: String,
    },
    /// No checkpoint names the file's digest.
    #[error(
        "no checkpoint names `{path}` (sha256 {sha256}): it was never archived (e.g. left by an \
         archive that failed before its checkpoint), or it was altered"
    )]
    NoCheckpoint {
        /// The file.
        path: PathBuf,
        /// Its SHA-256 (hex).
        sha256: String,
    },
    /// The checkpoint could not be stored after the file was written; the file is kept,
    /// because the outcome of the commit is unknown.
    #[error(
        "`{path}` was written but its checkpoint may not have been stored ({err}); the file is \
         kept: `secureclaw audit verify --archive {path}` says whether it was archived"
    )]
    Unknown {
        /// The archive file.
        path: PathBuf,
        /// The store error.
        err: StoreError,
    },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ArchiveError + '_ {
    move |err| ArchiveError::Io {
        path: path.to_path_buf(),
        err,
    }
}

/// What [`archive_audit`] archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archived {
    /// The stored checkpoint.
    pub checkpoint: AuditCheckpoint,
    /// The archive file.
    pub path: PathBuf,
}

/// Archive a verified segment of `store`'s audit log to a file, then checkpoint and prune it
/// (the steps are in the module docs). `keys` must hold the audit keys the records were
/// written under; `now` is the checkpoint's time. `Ok(None)` when there is nothing to
/// archive (no record kept, or none older than the cutoff); nothing is written then.
///
/// # Errors
/// [`ArchiveError::Unverified`] if the log does not verify (nothing written);
/// [`ArchiveError::OutOfRange`]; [`ArchiveError::Exists`]; [`ArchiveError::Io`] (the
/// partial file is removed; nothing pruned); [`ArchiveError::Store`] if the store refused
/// the segment — another archiver went first — (the file is removed; nothing pruned);
/// [`ArchiveError::Unknown`] if the commit failed otherwise (the file is kept).
pub async fn archive_audit(
    store: &dyn AuditSink,
    keys: &KeyRing,
    bound: ArchiveBound,
    target: &ArchiveTarget,
    now: UnixMillis,
) -> Result<Option<Archived>, ArchiveError> {
    let verified = store
        .verify_audit_log()
        .await
        .map_err(ArchiveError::Unverified)?;
    let start = match &verified.checkpoint {
        Some(c) => ChainVerifier::after(c.seq(), c.mac()),
        None => ChainVerifier::from_genesis(),
    };
    let first = start.last_seq().saturating_add(1);
    if verified.records == 0 {
        if let ArchiveBound::Through(asked) = bound {
            return Err(ArchiveError::OutOfRange {
                asked,
                first,
                last: verified.last_seq,
            });
        }
        return Ok(None);
    }
    if let ArchiveBound::Through(asked) = bound
        && !(first..=verified.last_seq).contains(&asked)
    {
        return Err(ArchiveError::OutOfRange {
            asked,
            first,
            last: verified.last_seq,
        });
    }
    // Collect the segment's records page by page until the bound.
    let mut segment: Vec<AuditRecord> = Vec::new();
    let mut next = first;
    'pages: loop {
        let page = store.audit_records(next, PAGE).await?;
        let Some(last) = page.last().map(|r| r.seq) else {
            break;
        };
        for r in page {
            let take = match bound {
                ArchiveBound::Through(n) => r.seq <= n,
                ArchiveBound::OlderThan(cutoff) => r.event.at < cutoff,
            };
            if !take {
                break 'pages;
            }
            segment.push(r);
        }
        next = last.saturating_add(1);
    }
    let Some(end) = segment.last().map(|r| r.seq) else {
        return Ok(None);
    };
    let path = match target {
        ArchiveTarget::File(p) => p.clone(),
        ArchiveTarget::Dir(d) => d.join(format!("audit-{first:012}-{end:012}-{}.jsonl", now.0)),
    };
    write_segment(keys, start.clone(), &segment, &path)?;
    drop(segment);
    // Verify what is on disk, not what was meant to be written.
    let (read, sha256) = match verify_file(keys, start, &path) {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
    };
    if read.last_seq() != end || read.count() != end - first + 1 {
        let _ = std::fs::remove_file(&path);
        return Err(ArchiveError::Audit(AuditError::Archive(format!(
            "the file written holds records through {} ({} records), not through {end}",
            read.last_seq(),
            read.count()
        ))));
    }
    let seg = ArchiveSegment {
        first_seq: first,
        seq: end,
        mac: read.last_mac().to_owned(),
        count: read.count(),
        archive_sha256: sha256,
        archive: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        at: now,
    };
    match store.archive_audit(&seg).await {
        Ok(checkpoint) => Ok(Some(Archived { checkpoint, path })),
        Err(e @ (StoreError::Conflict(_) | StoreError::Invalid(_) | StoreError::Key(_))) => {
            // Refused before anything changed: the file archives nothing.
            let _ = std::fs::remove_file(&path);
            Err(ArchiveError::Store(e))
        }
        Err(err) => Err(ArchiveError::Unknown { path, err }),
    }
}

/// Write `records` (verified from `start` as they go) to `path` through a hidden temporary
/// file in the same directory: written, `fsync`ed, hard-linked to `path` (which fails if
/// `path` exists), removed; then the directory is `fsync`ed.
fn write_segment(
    keys: &KeyRing,
    mut start: ChainVerifier,
    records: &[AuditRecord],
    path: &Path,
) -> Result<(), ArchiveError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if path.exists() {
        return Err(ArchiveError::Exists(path.to_path_buf()));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.partial"));
    let result: Result<(), ArchiveError> = (|| {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let file = opts.open(&tmp).map_err(io(&tmp))?;
        let mut out = std::io::BufWriter::new(file);
        for r in records {
            start.push(keys, r)?;
            let line = serde_json::to_string(r).map_err(|e| ArchiveError::Format {
                path: tmp.clone(),
                line: start.count(),
                err: e.to_string(),
            })?;
            out.write_all(line.as_bytes()).map_err(io(&tmp))?;
            out.write_all(b"\n").map_err(io(&tmp))?;
        }
        let file = out.into_inner().map_err(|e| io(&tmp)(e.into_error()))?;
        file.sync_all().map_err(io(&tmp))?;
        std::fs::hard_link(&tmp, path).map_err(|err| {
            if err.kind() == std::io::ErrorKind::AlreadyExists {
                ArchiveError::Exists(path.to_path_buf())
            } else {
                io(path)(err)
            }
        })?;
        Ok(())
    })();
    let _ = std::fs::remove_file(&tmp);
    result?;
    sync_dir(&dir)
}

/// `fsync` a directory, so that a new name in it survives a crash.
fn sync_dir(dir: &Path) -> Result<(), ArchiveError> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// The SHA-256 (hex) of a file's bytes.
///
/// # Errors
/// [`ArchiveError::Io`].
pub fn file_sha256(path: &Path) -> Result<String, ArchiveError> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        h.update(buf.get(..n).unwrap_or_default());
    }
    Ok(hex::encode(h.finalize()))
}

/// Read the archive file `path` line by line, verifying its records as a chain from `start`,
/// and hash its bytes. Returns the verifier after the last record and the SHA-256 (hex).
fn verify_file(
    keys: &KeyRing,
    mut start: ChainVerifier,
    path: &Path,
) -> Result<(ChainVerifier, String), ArchiveError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    let mut reader = std::io::BufReader::new(file);
    let mut h = Sha256::new();
    let mut line = Vec::new();
    let mut n = 0u64;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io(path))? == 0 {
            break;
        }
        n = n.saturating_add(1);
        h.update(&line);
        let r: AuditRecord = serde_json::from_slice(&line).map_err(|e| ArchiveError::Format {
            path: path.to_path_buf(),
            line: n,
            err: e.to_string(),
        })?;
        start.push(keys, &r)?;
    }
    Ok((start, hex::encode(h.finalize())))
}

/// Verify an archive file against `checkpoints` (all of the store's, oldest first, already
/// verified with [`secureclaw_core::audit::verify_checkpoints`]): the checkpoint naming the
/// file's SHA-256 is found, and the file's records must chain from the checkpoint before it
/// (the genesis for the first) and end at this checkpoint's sequence number, MAC and count.
/// Returns that checkpoint.
///
/// # Errors
/// [`ArchiveError::NoCheckpoint`] if no checkpoint names the digest (not archived, or
/// altered); [`ArchiveError::Format`]; [`ArchiveError::Audit`] if the records do not verify
/// or do not end where the checkpoint says; [`ArchiveError::Io`].
pub fn verify_archive_file(
    keys: &KeyRing,
    checkpoints: &[AuditCheckpoint],
    path: &Path,
) -> Result<AuditCheckpoint, ArchiveError> {
    let sha256 = file_sha256(path)?;
    let checkpoint = checkpoints
        .iter()
        .find(|c| c.segment.archive_sha256 == sha256)
        .ok_or_else(|| ArchiveError::NoCheckpoint {
            path: path.to_path_buf(),
            sha256: sha256.clone(),
        })?;
    let start =
        archive_start(checkpoints, checkpoint).ok_or_else(|| ArchiveError::NoCheckpoint {
            path: path.to_path_buf(),
            sha256: sha256.clone(),
        })?;
    let (read, again) = verify_file(keys, start, path)?;
    if again != sha256 {
        return Err(ArchiveError::Audit(AuditError::Archive(
            "the file changed while it was verified".into(),
        )));
    }
    check_archive_end(&read, checkpoint)?;
    Ok(checkpoint.clone())
}
