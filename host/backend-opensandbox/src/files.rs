//! execd's file upload body: multipart pairs, each a `metadata` part (sent
//! as a file part, as the official SDK does and execd requires) followed by
//! the `file` part.

/// The multipart body that writes `contents` to `path` with `mode`, and its
/// content type.
pub(crate) fn upload_body(path: &str, contents: &[u8], mode: u32) -> (String, Vec<u8>) {
    let boundary = format!("sandfleet-{:016x}{:016x}", crate::random(), crate::random());
    // execd reads the mode's digits as octal: 0o644 is sent as 644.
    let mode: u32 = format!("{mode:o}").parse().unwrap_or(644);
    let metadata = serde_json::json!({"path": path, "mode": mode}).to_string();
    let name = path
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("file");
    let mut body = Vec::with_capacity(contents.len() + 512);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\nContent-Type: application/json\r\n\r\n{metadata}\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\nContent-Type: application/octet-stream\r\n\r\n",
            name.replace('"', "_")
        )
        .as_bytes(),
    );
    body.extend_from_slice(contents);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_part_is_a_file_part_before_the_file() {
        let (content_type, body) = upload_body("/workspace/patch.diff", b"diff\n", 0o644);
        let boundary = content_type
            .strip_prefix("multipart/form-data; boundary=")
            .unwrap();
        let text = String::from_utf8(body).unwrap();
        let metadata = text
            .find("name=\"metadata\"; filename=\"metadata\"")
            .unwrap();
        let file = text.find("name=\"file\"; filename=\"patch.diff\"").unwrap();
        assert!(metadata < file);
        let metadata_json = text
            .lines()
            .find(|line| line.starts_with('{'))
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .unwrap();
        assert_eq!(
            metadata_json,
            serde_json::json!({"path": "/workspace/patch.diff", "mode": 644})
        );
        assert!(text.ends_with(&format!("\r\n--{boundary}--\r\n")));
        assert!(text.contains("\r\n\r\ndiff\n\r\n"));
    }
}
