<#
.SYNOPSIS
Helpers shared by install-ddod.ps1 and uninstall-ddod.ps1 (deploy/windows/README.md).

.DESCRIPTION
Checks elevation, resolves paths, computes a service's SID, runs sc.exe and secedit.exe with their
exit codes checked, writes a directory's access control list from scratch, and grants or revokes
user rights (LSA privileges) of one account through secedit with a backup of the policy first.
The scripts import it from their own folder; it is not meant to be used on its own.
#>

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

# The privileges the service's token keeps (sc.exe privs): everything else is removed from it
# when it starts. SeChangeNotifyPrivilege and SeCreateGlobalPrivilege come from groups every
# service account is in (Everyone, SERVICE); the other two are granted to the service's own SID.
$DdoRequiredPrivileges = @(
    'SeChangeNotifyPrivilege',
    'SeCreateGlobalPrivilege',
    'SeProfileSingleProcessPrivilege',
    'SeIncreaseQuotaPrivilege'
)
# The user rights install-ddod.ps1 grants to NT SERVICE\<name> and uninstall-ddod.ps1 revokes.
$DdoGrantedUserRights = @(
    'SeProfileSingleProcessPrivilege',
    'SeIncreaseQuotaPrivilege'
)

$script:SystemSid = New-Object System.Security.Principal.SecurityIdentifier('S-1-5-18')
$script:AdministratorsSid = New-Object System.Security.Principal.SecurityIdentifier('S-1-5-32-544')

function Write-DdoStep {
    param([Parameter(Mandatory = $true)][string] $Message)
    Write-Host "  $Message"
}

function Assert-DdoAdministrator {
    if ($env:OS -ne 'Windows_NT') {
        throw 'These scripts install a Windows service: run them on Windows.'
    }
    $identity = [System.Security.Principal.WindowsIdentity]::GetCurrent()
    $principal = New-Object System.Security.Principal.WindowsPrincipal($identity)
    if (-not $principal.IsInRole([System.Security.Principal.WindowsBuiltInRole]::Administrator)) {
        throw ('This script creates a service, a local group and an ACL and changes the local ' +
            'security policy: run it from an elevated PowerShell (right-click, Run as administrator).')
    }
}

function Resolve-DdoDirectoryPath {
    # A full path without a trailing separator: the service's command line quotes it, and a
    # backslash before the closing quote would escape the quote.
    param(
        [Parameter(Mandatory = $true)][string] $Path,
        [Parameter(Mandatory = $true)][string] $ParameterName
    )
    $full = $ExecutionContext.SessionState.Path.GetUnresolvedProviderPathFromPSPath($Path)
    $full = [System.IO.Path]::GetFullPath($full)
    $root = [System.IO.Path]::GetPathRoot($full)
    $trimmed = $full.TrimEnd('\', '/')
    if ($trimmed.Length -eq 0 -or $trimmed -eq $root.TrimEnd('\', '/')) {
        throw "-${ParameterName} must name a directory below a drive's root, not '$Path'."
    }
    return $trimmed
}

function Resolve-DdoFilePath {
    param(
        [Parameter(Mandatory = $true)][string] $Path,
        [Parameter(Mandatory = $true)][string] $ParameterName
    )
    if (-not (Test-Path -LiteralPath $Path -PathType Leaf)) {
        throw "-${ParameterName}: no such file: '$Path'."
    }
    return (Resolve-Path -LiteralPath $Path).ProviderPath
}

function Test-DdoSameFile {
    # True when both files exist and have the same content.
    param(
        [Parameter(Mandatory = $true)][string] $Source,
        [Parameter(Mandatory = $true)][string] $Destination
    )
    if (-not (Test-Path -LiteralPath $Destination -PathType Leaf)) {
        return $false
    }
    $a = (Get-FileHash -LiteralPath $Source -Algorithm SHA256).Hash
    $b = (Get-FileHash -LiteralPath $Destination -Algorithm SHA256).Hash
    return $a -eq $b
}

function Get-DdoServiceSid {
    # A service's SID is S-1-5-80- and the SHA-1 of its upper-cased name in UTF-16LE, read as
    # five little-endian 32-bit numbers (what `sc.exe showsid NAME` prints). Computed, because
    # "NT SERVICE\NAME" resolves to it only while the service exists.
    param([Parameter(Mandatory = $true)][string] $ServiceName)
    $bytes = [System.Text.Encoding]::Unicode.GetBytes($ServiceName.ToUpperInvariant())
    $sha1 = [System.Security.Cryptography.SHA1]::Create()
    try {
        $hash = $sha1.ComputeHash($bytes)
    } finally {
        $sha1.Dispose()
    }
    $parts = foreach ($i in 0..4) { [System.BitConverter]::ToUInt32($hash, 4 * $i) }
    return New-Object System.Security.Principal.SecurityIdentifier('S-1-5-80-' + ($parts -join '-'))
}

function Get-DdoLocalGroupSid {
    param([Parameter(Mandatory = $true)][string] $GroupName)
    # Qualified with the computer's name, so that a domain group of the same name is not taken.
    $account = New-Object System.Security.Principal.NTAccount($env:COMPUTERNAME, $GroupName)
    return $account.Translate([System.Security.Principal.SecurityIdentifier])
}

function Invoke-DdoNative {
    # Runs a program and returns its exit code and output. Windows PowerShell turns a line on
    # stderr into a terminating error under $ErrorActionPreference = 'Stop'; the exit code is
    # what is checked instead.
    param(
        [Parameter(Mandatory = $true)][string] $FilePath,
        [Parameter(Mandatory = $true)][string[]] $ArgumentList
    )
    $ErrorActionPreference = 'Continue'
    $output = & $FilePath @ArgumentList 2>&1 | ForEach-Object { "$_" }
    $exitCode = $LASTEXITCODE
    return [pscustomobject]@{
        ExitCode = $exitCode
        Output   = (@($output) -join [Environment]::NewLine).Trim()
    }
}

function Invoke-DdoServiceControl {
    # sc.exe with its exit code checked (it is the Win32 error code: 1060 = no such service).
    param([Parameter(Mandatory = $true)][string[]] $ArgumentList)
    $sc = Join-Path $env:SystemRoot 'System32\sc.exe'
    $result = Invoke-DdoNative -FilePath $sc -ArgumentList $ArgumentList
    if ($result.ExitCode -ne 0) {
        throw ("sc.exe $($ArgumentList -join ' ') failed with exit code $($result.ExitCode): " +
            $result.Output)
    }
    return $result.Output
}

function Set-DdoDirectoryAcl {
    # Replaces the directory's ACL: owner Administrators, inheritance from the parent off, and
    # exactly these entries, each inherited by everything below.
    param(
        [Parameter(Mandatory = $true)][string] $Path,
        [Parameter(Mandatory = $true)][System.Security.Principal.SecurityIdentifier[]] $FullControl,
        [System.Security.Principal.SecurityIdentifier[]] $ReadAndExecute = @()
    )
    $acl = New-Object System.Security.AccessControl.DirectorySecurity
    $acl.SetAccessRuleProtection($true, $false)
    $acl.SetOwner($script:AdministratorsSid)
    $inheritance = [System.Security.AccessControl.InheritanceFlags]'ContainerInherit, ObjectInherit'
    $propagation = [System.Security.AccessControl.PropagationFlags]::None
    $allow = [System.Security.AccessControl.AccessControlType]::Allow
    foreach ($sid in $FullControl) {
        $rule = New-Object System.Security.AccessControl.FileSystemAccessRule(
            $sid, [System.Security.AccessControl.FileSystemRights]::FullControl,
            $inheritance, $propagation, $allow)
        $acl.AddAccessRule($rule)
    }
    foreach ($sid in $ReadAndExecute) {
        $rule = New-Object System.Security.AccessControl.FileSystemAccessRule(
            $sid, [System.Security.AccessControl.FileSystemRights]::ReadAndExecute,
            $inheritance, $propagation, $allow)
        $acl.AddAccessRule($rule)
    }
    Set-Acl -LiteralPath $Path -AclObject $acl
}

function Add-DdoDirectoryReadAccess {
    # Adds one read-and-execute entry (inherited below) to a directory, keeping the rest.
    param(
        [Parameter(Mandatory = $true)][string] $Path,
        [Parameter(Mandatory = $true)][System.Security.Principal.SecurityIdentifier] $Sid
    )
    $acl = Get-Acl -LiteralPath $Path
    $rule = New-Object System.Security.AccessControl.FileSystemAccessRule(
        $Sid, [System.Security.AccessControl.FileSystemRights]::ReadAndExecute,
        [System.Security.AccessControl.InheritanceFlags]'ContainerInherit, ObjectInherit',
        [System.Security.AccessControl.PropagationFlags]::None,
        [System.Security.AccessControl.AccessControlType]::Allow)
    $acl.AddAccessRule($rule)
    Set-Acl -LiteralPath $Path -AclObject $acl
}

function Test-DdoAclHasSid {
    # True when the directory's ACL has an explicit entry for the SID.
    param(
        [Parameter(Mandatory = $true)][string] $Path,
        [Parameter(Mandatory = $true)][System.Security.Principal.SecurityIdentifier] $Sid
    )
    $acl = Get-Acl -LiteralPath $Path
    $rules = $acl.GetAccessRules($true, $false, [System.Security.Principal.SecurityIdentifier])
    foreach ($rule in $rules) {
        if ($rule.IdentityReference.Value -eq $Sid.Value) {
            return $true
        }
    }
    return $false
}

function Get-DdoPolicyBackupDirectory {
    # Exports of the user rights taken before each change, readable by administrators only
    # (they list every account's privileges). Kept by the uninstall script.
    $path = Join-Path $env:ProgramData 'DDO-policy-backup'
    if (-not (Test-Path -LiteralPath $path -PathType Container)) {
        New-Item -ItemType Directory -Path $path -WhatIf:$false -Confirm:$false | Out-Null
    }
    Set-DdoDirectoryAcl -Path $path -FullControl @($script:SystemSid, $script:AdministratorsSid)
    return $path
}

function Export-DdoUserRightTemplate {
    # secedit's export of the user rights (the [Privilege Rights] section) into a new file.
    param([Parameter(Mandatory = $true)][string] $WorkDirectory)
    $name = 'user-rights-' + [guid]::NewGuid().ToString('N')
    $inf = Join-Path $WorkDirectory "$name.inf"
    $log = Join-Path $WorkDirectory "$name.log"
    $secedit = Join-Path $env:SystemRoot 'System32\secedit.exe'
    $result = Invoke-DdoNative -FilePath $secedit -ArgumentList @(
        '/export', '/cfg', $inf, '/areas', 'USER_RIGHTS', '/log', $log)
    if ($result.ExitCode -ne 0 -or -not (Test-Path -LiteralPath $inf -PathType Leaf)) {
        throw "secedit /export failed with exit code $($result.ExitCode) (log: $log): $($result.Output)"
    }
    return $inf
}

function ConvertFrom-DdoUserRightTemplate {
    # The [Privilege Rights] section of a secedit template: privilege name -> its holders, each
    # '*S-1-...' (a SID) or an account name, as secedit wrote them.
    param([Parameter(Mandatory = $true)][string] $Path)
    $rights = [ordered]@{}
    $inSection = $false
    # No -Encoding: secedit writes UTF-16 with a byte order mark, which Get-Content detects.
    foreach ($line in (Get-Content -LiteralPath $Path)) {
        $text = $line.Trim()
        if ($text -match '^\[(.+)\]$') {
            $inSection = ($Matches[1].Trim() -eq 'Privilege Rights')
            continue
        }
        if ($inSection -and $text -match '^(\w+)\s*=\s*(.*)$') {
            $holders = @($Matches[2].Split(',') | ForEach-Object { $_.Trim() } | Where-Object { $_ })
            $rights[$Matches[1]] = $holders
        }
    }
    return $rights
}

function Test-DdoPolicyEntry {
    param(
        [Parameter(Mandatory = $true)][string] $Entry,
        [Parameter(Mandatory = $true)][System.Security.Principal.SecurityIdentifier] $Sid,
        [Parameter(Mandatory = $true)][string] $AccountName
    )
    if ($Entry.StartsWith('*')) {
        return $Entry.Substring(1) -eq $Sid.Value
    }
    return $Entry -eq $AccountName
}

function Get-DdoUserRightHolder {
    param(
        $Rights,
        [Parameter(Mandatory = $true)][string] $Privilege
    )
    if ($Rights.Contains($Privilege)) {
        return , @($Rights[$Privilege])
    }
    return , @()
}

function Update-DdoUserRight {
    <#
    Grants (or revokes) the user rights $Privilege to (from) one account, leaving every other
    holder as it was, and returns the names of the rights it changed (none when nothing was to
    change). secedit applies a template's line for a right as that right's whole list of
    holders, so the current list is exported first and the new line is that list with the one
    account added or removed; the template names only the rights that change. The export is
    copied to $BackupDirectory before anything changes; the result is exported again and
    checked.
    #>
    param(
        [Parameter(Mandatory = $true)][string[]] $Privilege,
        [Parameter(Mandatory = $true)][System.Security.Principal.SecurityIdentifier] $Sid,
        [Parameter(Mandatory = $true)][string] $AccountName,
        [Parameter(Mandatory = $true)][ValidateSet('Grant', 'Revoke')][string] $Action,
        [Parameter(Mandatory = $true)][string] $BackupDirectory
    )
    $work = Join-Path ([System.IO.Path]::GetTempPath()) ('ddo-secedit-' + [guid]::NewGuid().ToString('N'))
    New-Item -ItemType Directory -Path $work -WhatIf:$false -Confirm:$false | Out-Null
    $keepWork = $false
    try {
        $export = Export-DdoUserRightTemplate -WorkDirectory $work
        $before = ConvertFrom-DdoUserRightTemplate -Path $export
        $changes = [ordered]@{}
        foreach ($name in $Privilege) {
            $holders = Get-DdoUserRightHolder -Rights $before -Privilege $name
            $others = @($holders | Where-Object {
                    -not (Test-DdoPolicyEntry -Entry $_ -Sid $Sid -AccountName $AccountName) })
            $held = $others.Count -ne $holders.Count
            if ($Action -eq 'Grant' -and -not $held) {
                $changes[$name] = @($holders) + @('*' + $Sid.Value)
            } elseif ($Action -eq 'Revoke' -and $held) {
                $changes[$name] = $others
            }
        }
        if ($changes.Count -eq 0) {
            return @()
        }

        $backup = Join-Path $BackupDirectory ('user-rights-{0:yyyyMMdd-HHmmss-fff}.inf' -f (Get-Date))
        Copy-Item -LiteralPath $export -Destination $backup -WhatIf:$false -Confirm:$false

        $template = Join-Path $work 'change.inf'
        $database = Join-Path $work 'change.sdb'
        $log = Join-Path $work 'change.log'
        $lines = @('[Unicode]', 'Unicode=yes', '[Version]', 'signature="$CHICAGO$"', 'Revision=1',
            '[Privilege Rights]')
        foreach ($name in $changes.Keys) {
            $lines += '{0} = {1}' -f $name, ($changes[$name] -join ',')
        }
        Set-Content -LiteralPath $template -Value $lines -Encoding Unicode -WhatIf:$false -Confirm:$false

        # A new database each time: /configure applies the template and nothing kept from an
        # earlier run, and asks nothing (it asks only to overwrite a database).
        $secedit = Join-Path $env:SystemRoot 'System32\secedit.exe'
        $result = Invoke-DdoNative -FilePath $secedit -ArgumentList @(
            '/configure', '/db', $database, '/cfg', $template, '/areas', 'USER_RIGHTS',
            '/log', $log)

        $after = ConvertFrom-DdoUserRightTemplate -Path (Export-DdoUserRightTemplate -WorkDirectory $work)
        foreach ($name in $changes.Keys) {
            $holders = Get-DdoUserRightHolder -Rights $after -Privilege $name
            $mine = @($holders | Where-Object {
                    Test-DdoPolicyEntry -Entry $_ -Sid $Sid -AccountName $AccountName })
            if (($mine.Count -gt 0) -ne ($Action -eq 'Grant')) {
                $keepWork = $true
                throw ("secedit /configure (exit code $($result.ExitCode)) did not $($Action.ToLower()) " +
                    "$name for $AccountName. Its template and log are in $work; the rights as they " +
                    "were before are in $backup (secedit /configure /db NEW.sdb /cfg `"$backup`" " +
                    '/areas USER_RIGHTS restores them).')
            }
        }
        if ($result.ExitCode -ne 0) {
            # The rights changed as asked, but secedit warned (for instance about a holder of
            # the same right that no longer resolves): worth a look, not a failure.
            $keepWork = $true
            Write-Warning ("secedit /configure exited with $($result.ExitCode) although the rights " +
                "changed as asked; its log is $log.")
        }
        return @($changes.Keys)
    } finally {
        if (-not $keepWork) {
            Remove-Item -LiteralPath $work -Recurse -Force -WhatIf:$false -Confirm:$false `
                -ErrorAction SilentlyContinue
        }
    }
}

function Get-DdoServiceInfo {
    # The service's configuration from the service control manager (Win32_Service; $null when
    # there is no such service), with its required privileges from its registry key, which the
    # manager writes.
    param([Parameter(Mandatory = $true)][string] $ServiceName)
    $service = Get-CimInstance -ClassName Win32_Service -Filter "Name='$ServiceName'"
    if ($null -eq $service) {
        return $null
    }
    $key = "HKLM:\SYSTEM\CurrentControlSet\Services\$ServiceName"
    $privileges = @()
    $item = Get-ItemProperty -LiteralPath $key -ErrorAction SilentlyContinue
    if ($null -ne $item -and $item.PSObject.Properties.Name -contains 'RequiredPrivileges') {
        $privileges = @($item.RequiredPrivileges)
    }
    return [pscustomobject]@{
        Instance           = $service
        PathName           = [string]$service.PathName
        StartName          = [string]$service.StartName
        State              = [string]$service.State
        ProcessId          = [int]$service.ProcessId
        RequiredPrivileges = $privileges
    }
}

function Stop-DdoService {
    # Stops the service and waits for its process to exit, so that its files can be replaced
    # or removed.
    param([Parameter(Mandatory = $true)][string] $ServiceName)
    $info = Get-DdoServiceInfo -ServiceName $ServiceName
    if ($null -eq $info -or $info.State -eq 'Stopped') {
        return
    }
    Stop-Service -Name $ServiceName -Force -WhatIf:$false -Confirm:$false
    if ($info.ProcessId -ne 0) {
        Wait-Process -Id $info.ProcessId -Timeout 60 -ErrorAction SilentlyContinue
    }
}

Export-ModuleMember -Function * -Variable DdoRequiredPrivileges, DdoGrantedUserRights
