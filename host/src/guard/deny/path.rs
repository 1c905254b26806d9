//! A file path in the form a `pathPattern` is also tried on.
//!
//! Paths are matched as written and, when different, lexically normalised:
//! `\` read as `/`, empty and `.` segments dropped, `a/..` resolved, so that
//! `config/./production.yml` or `docs/../config/production.yml` does not slip
//! past `config/production`. Nothing touches the filesystem: the jail of the
//! fs capability decides where a path really leads.

/// `path` with `\` as `/`, empty and `.` segments dropped and `..` resolved
/// lexically; `None` when that changes nothing.
pub(super) fn normalize_path(path: &str) -> Option<String> {
    let needs = path.contains('\\')
        || path.contains("//")
        || path
            .split(['/', '\\'])
            .any(|segment| segment == "." || segment == "..");
    if !needs {
        return None;
    }
    let unified = path.replace('\\', "/");
    let absolute = unified.starts_with('/');
    let mut segments: Vec<&str> = Vec::new();
    for segment in unified.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if segments.last().is_some_and(|s| *s != "..") {
                    segments.pop();
                } else if !absolute {
                    segments.push("..");
                }
            }
            segment => segments.push(segment),
        }
    }
    let joined = segments.join("/");
    let normal = if absolute {
        format!("/{joined}")
    } else {
        joined
    };
    (normal != path).then_some(normal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize_lexically() {
        let cases = [
            ("config/production.yml", None),
            ("./config/production.yml", Some("config/production.yml")),
            ("a//b/./c", Some("a/b/c")),
            ("a/b/../../c", Some("c")),
            ("../x", None),
            ("../a/../x", Some("../x")),
            ("/../etc/passwd", Some("/etc/passwd")),
            ("a\\b", Some("a/b")),
        ];
        for (path, expected) in cases {
            assert_eq!(normalize_path(path).as_deref(), expected, "{path}");
        }
    }
}
