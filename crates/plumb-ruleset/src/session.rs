//! Terminal sessions pasted as one file: command lines (`$ iptables -t nat -L X -n`,
//! `host:/# iptables-save | grep nginx`, `sudo iptables ... | column -t`) each followed
//! by its output. [`split`] cuts the text at the command lines and says what each
//! output is, from its command (`iptables -t nat -L X` gives the table and the chain;
//! `iptables-save | grep` a filtered save) or, for commands plumb does not know (shell
//! aliases), from the output itself. `format` reads each ruleset section with its own
//! reader (an unknown command's output by what it looks like) and merges them into one
//! ruleset, with `ipvsadm -ln` and `ipset list` outputs as its IPVS services and sets;
//! other output (kubectl) is skipped with a note. Shell aliases (`ipt` for `iptables -t
//! nat -nvL`) are read by what their output looks like, and every listing of one alias
//! is of one table (an alias expands to the same command each time).

/// What one section's output is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// An `iptables -L` listing; `table` from `-t` (iptables' default `filter` when the
    /// command is iptables without `-t`; `None` when the command is unknown), `chain`
    /// when the command lists one chain.
    Listing {
        /// The table the listing is of (`nat`, `filter`, ...).
        table: Option<&'static str>,
        /// The one chain listed (`-L KUBE-SERVICES`); `None` for the whole table.
        chain: Option<String>,
    },
    /// `iptables -S` output (`table` as for a listing).
    ListRules {
        /// The table the rules are of, as for a listing.
        table: Option<&'static str>,
    },
    /// `iptables-save` output; `filtered` when piped through grep/head/sed/awk/tail.
    Save {
        /// The output went through a filter (`| grep`, `| head`, ...): tables or chains
        /// may be missing, so it is read as a partial ruleset.
        filtered: bool,
    },
    /// `ipvsadm -L` output: IPVS virtual services (kube-proxy's IPVS mode).
    Ipvsadm,
    /// `ipset list` output: the sets rules match with `-m set`.
    IpsetList,
    /// Anything else (kubectl, crictl): not read as a ruleset.
    Other,
    /// A command plumb does not know (a shell alias such as `ipt KUBE-SERVICES`): what
    /// the output is must be told from the output itself.
    Unknown,
}

/// One command and its output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section<'a> {
    /// The command as typed (prompt removed), `None` for text before the first command.
    pub command: Option<&'a str>,
    /// The line of the command (1-based; the first output line when no command).
    pub command_line: u32,
    /// The first line of the output (1-based).
    pub first_line: u32,
    /// The output, verbatim.
    pub text: &'a str,
    /// What the output is, from the command (or, for [`Output::Unknown`], to be told from the
    /// output).
    pub output: Output,
}

/// Commands whose line, typed without a prompt, still starts a section.
const KNOWN: [&str; 11] = [
    "iptables",
    "ip6tables",
    "iptables-save",
    "ip6tables-save",
    "ipset",
    "ipvsadm",
    "kubectl",
    "nft",
    "conntrack",
    "crictl",
    "docker",
];

/// The command of a prompt line (`$ cmd`, `user@host:~$ cmd`, `host:/# cmd`,
/// `[root@host ~]# cmd`), or of a line that starts with a command plumb knows
/// (`sudo iptables -t nat -L X`), without a trailing `# comment`.
pub fn command_of(line: &str) -> Option<&str> {
    let t = line.trim();
    let cmd = if let Some(r) = t.strip_prefix("$ ").or_else(|| t.strip_prefix("$\t")) {
        r
    } else if let Some(i) = t.find("# ").or_else(|| t.find("$ "))
        && i > 0
        && is_prompt(&t[..i])
    {
        &t[i + 2..]
    } else {
        let first = t.split_whitespace().next()?;
        let word = if first == "sudo" {
            t.split_whitespace().nth(1)?
        } else {
            first
        };
        let base = word.rsplit('/').next().unwrap_or(word);
        if !KNOWN.iter().any(|k| base == *k || is_iptables(base)) {
            return None;
        }
        t
    };
    // `iptables-save # No new entries`: the author's note.
    let cmd = match cmd.find(" # ") {
        Some(i) => &cmd[..i],
        None => cmd,
    };
    let cmd = cmd.trim();
    (!cmd.is_empty()).then_some(cmd)
}

/// A shell prompt before `#`/`$`: one word with `@` or `:` (`root@h:~`, `h:/`) or a
/// bracketed `[user@host dir]`.
fn is_prompt(p: &str) -> bool {
    if p.starts_with('[') && p.ends_with(']') {
        return p.contains('@');
    }
    !p.contains(char::is_whitespace) && (p.contains('@') || p.contains(':'))
}

/// `iptables`, `ip6tables`, `iptables-legacy`, `iptables-nft` (not `-save`/`-restore`).
fn is_iptables(cmd: &str) -> bool {
    matches!(
        cmd,
        "iptables"
            | "ip6tables"
            | "iptables-legacy"
            | "ip6tables-legacy"
            | "iptables-nft"
            | "ip6tables-nft"
    )
}

/// True when the text is a session: its first non-blank line is a prompt line.
pub fn is_session(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .is_some_and(|l| {
            (l.starts_with('$') || (!l.starts_with('#') && l.contains("# ")))
                && command_of(l).is_some()
        })
}

/// What the output of `command` is, from the command alone.
pub fn output_of(command: &str) -> Output {
    let mut stages = command.split('|');
    let main = stages.next().unwrap_or("");
    let filtered = stages.any(|s| {
        let w = s.split_whitespace().next().unwrap_or("");
        matches!(w, "grep" | "egrep" | "head" | "tail" | "sed" | "awk")
    });
    let mut words: Vec<&str> = main.split_whitespace().collect();
    if words.first() == Some(&"sudo") {
        words.remove(0);
    }
    let Some(cmd) = words.first().map(|w| w.rsplit('/').next().unwrap_or(w)) else {
        return Output::Unknown;
    };
    let table = || {
        let mut table = "filter";
        for (i, a) in words.iter().enumerate() {
            let v = match *a {
                "-t" | "--table" => words.get(i + 1).copied(),
                _ => a.strip_prefix("--table="),
            };
            if let Some(v) = v
                && let Some(t) = crate::iptables::tables::TABLES.iter().find(|t| **t == v)
            {
                table = t;
            }
        }
        table
    };
    if matches!(
        cmd,
        "iptables-save"
            | "ip6tables-save"
            | "iptables-legacy-save"
            | "ip6tables-legacy-save"
            | "iptables-nft-save"
            | "ip6tables-nft-save"
    ) {
        return Output::Save { filtered };
    }
    if is_iptables(cmd) {
        let args = &words[1..];
        let short = |a: &str, c: char| {
            a.starts_with('-') && !a.starts_with("--") && a.contains(c) && a != "-t"
        };
        if let Some(i) = args.iter().position(|a| *a == "--list" || short(a, 'L')) {
            let chain = args
                .get(i + 1)
                .filter(|w| !w.starts_with('-'))
                .map(|w| w.to_string());
            return Output::Listing {
                table: Some(table()),
                chain,
            };
        }
        if args.iter().any(|a| *a == "--list-rules" || short(a, 'S')) {
            return Output::ListRules {
                table: Some(table()),
            };
        }
        return Output::Other;
    }
    if cmd == "ipvsadm" {
        let lists = words[1..].iter().any(|a| {
            matches!(*a, "--list" | "-l")
                || (a.starts_with('-') && !a.starts_with("--") && a.contains(['L', 'l']))
        });
        return if lists {
            Output::Ipvsadm
        } else {
            Output::Other
        };
    }
    if cmd == "ipset" {
        let lists = matches!(words.get(1).copied(), Some("list" | "-L" | "-l" | "--list"));
        return if lists {
            Output::IpsetList
        } else {
            Output::Other
        };
    }
    if KNOWN.contains(&cmd) {
        return Output::Other;
    }
    // A shell alias (`ipt KUBE-SERVICES`): the caller looks at the output.
    Output::Unknown
}

/// Cuts a session into its commands and their outputs. Never fails; text before the
/// first command is a section without command.
pub fn split(text: &str) -> Vec<Section<'_>> {
    fn push<'a>(
        out: &mut Vec<Section<'a>>,
        text: &'a str,
        command: Option<(&'a str, u32)>,
        (from, to): (usize, usize),
        first_line: u32,
    ) {
        let body = &text[from..to];
        if command.is_none() && body.trim().is_empty() {
            return;
        }
        let output = match command {
            Some((c, _)) => output_of(c),
            None => Output::Unknown,
        };
        out.push(Section {
            command: command.map(|c| c.0),
            command_line: command.map_or(first_line, |c| c.1),
            first_line,
            text: body,
            output,
        });
    }
    let mut out = Vec::new();
    let mut start = 0usize; // byte offset of the current section's output
    let mut first_line = 1u32;
    let mut command: Option<(&str, u32)> = None;
    let mut offset = 0usize;
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let n = i as u32 + 1;
        let line = raw.trim_end_matches(['\n', '\r']);
        if let Some(c) = command_of(line) {
            push(&mut out, text, command, (start, offset), first_line);
            command = Some((c, n));
            start = offset + raw.len();
            first_line = n + 1;
        }
        offset += raw.len();
    }
    push(&mut out, text, command, (start, text.len()), first_line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_and_bare_commands() {
        assert_eq!(
            command_of("$ iptables -t nat -L -n -v"),
            Some("iptables -t nat -L -n -v")
        );
        assert_eq!(
            command_of("aks-nodepool1-1:/# iptables-save | grep nginx"),
            Some("iptables-save | grep nginx")
        );
        assert_eq!(command_of("root@h:~# ipset -L # No rows"), Some("ipset -L"));
        assert_eq!(
            command_of("[root@node1 ~]# iptables -nL"),
            Some("iptables -nL")
        );
        assert_eq!(
            command_of("sudo iptables -t nat -L KUBE-SERVICES -n  | column -t"),
            Some("sudo iptables -t nat -L KUBE-SERVICES -n  | column -t")
        );
        assert_eq!(command_of("kubectl get svc"), Some("kubectl get svc"));
        // Listing and save lines are output, not commands.
        assert_eq!(command_of("Chain INPUT (policy ACCEPT)"), None);
        assert_eq!(command_of("-A KUBE-SERVICES -j KUBE-NODEPORTS"), None);
        assert_eq!(
            command_of("KUBE-MARK-MASQ  all  --  0.0.0.0/0  0.0.0.0/0  /* a # b */"),
            None
        );
        assert_eq!(
            command_of("# Warning: iptables-legacy tables present"),
            None
        );
    }

    #[test]
    fn outputs_from_commands() {
        assert_eq!(
            output_of("sudo iptables -t nat -L KUBE-SVC-X -n | column -t"),
            Output::Listing {
                table: Some("nat"),
                chain: Some("KUBE-SVC-X".into())
            }
        );
        assert_eq!(
            output_of("iptables -vnL"),
            Output::Listing {
                table: Some("filter"),
                chain: None
            }
        );
        assert_eq!(
            output_of("iptables-save | grep nginx"),
            Output::Save { filtered: true }
        );
        assert_eq!(
            output_of("iptables -t mangle -S"),
            Output::ListRules {
                table: Some("mangle")
            }
        );
        assert_eq!(output_of("kubectl get svc"), Output::Other);
        assert_eq!(output_of("ipvsadm -ln"), Output::Ipvsadm);
        assert_eq!(output_of("sudo ipvsadm -L -n"), Output::Ipvsadm);
        assert_eq!(output_of("ipvsadm -A -t 1.2.3.4:80"), Output::Other);
        assert_eq!(output_of("ipset list KUBE-CLUSTER-IP"), Output::IpsetList);
        assert_eq!(output_of("ipt KUBE-SERVICES"), Output::Unknown);
    }

    #[test]
    fn split_keeps_every_line_in_one_section() {
        let text = "$ kubectl get svc\nNAME\n\n$ iptables -t nat -L X -n\nChain X (1 references)\ntarget prot opt source destination\n";
        let s = split(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].command, Some("kubectl get svc"));
        assert_eq!(s[0].first_line, 2);
        assert_eq!(s[0].output, Output::Other);
        assert_eq!(s[1].command_line, 4);
        assert_eq!(s[1].first_line, 5);
        assert!(s[1].text.starts_with("Chain X"));
        let total: usize = s.iter().map(|x| x.text.len()).sum::<usize>()
            + "$ kubectl get svc\n".len()
            + "$ iptables -t nat -L X -n\n".len();
        assert_eq!(total, text.len());
    }
}
